#include "ledger/internal/journal_format.h"

#include <cstdio>

#include "common/byte_codec.h"

namespace moerl::ledger::detail {

std::string frame(const std::string& payload) {
  byte_writer w;
  w.u32(static_cast<uint32_t>(payload.size()));
  w.u32(crc32(payload.data(), payload.size()));
  w.bytes().append(payload);
  return std::move(w.bytes());
}

frames_read read_frames(const std::string& bytes) {
  frames_read out;
  size_t pos = 0;
  while (pos < bytes.size()) {
    byte_reader hdr(bytes.data() + pos, bytes.size() - pos);
    uint32_t len = hdr.u32();
    uint32_t crc = hdr.u32();
    if (!hdr.ok() || hdr.remaining() < len) break;  // torn: the write stopped mid-frame
    const char* payload = bytes.data() + pos + 8;
    if (crc32(payload, len) != crc) break;  // damaged
    out.payloads.emplace_back(payload, len);
    pos += 8 + size_t(len);
  }
  out.valid_bytes = pos;
  out.torn_bytes = bytes.size() - pos;
  return out;
}

std::string journal_dir(const std::string& prefix) { return prefix + "/journal/"; }
std::string snapshot_dir(const std::string& prefix) { return prefix + "/snapshot/"; }

namespace {
std::string seq_text(uint64_t seq) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llu", static_cast<unsigned long long>(seq));
  return buf;
}
}  // namespace

std::string journal_key(const std::string& prefix, uint64_t first_seq) {
  return journal_dir(prefix) + seq_text(first_seq);
}
std::string snapshot_key(const std::string& prefix, uint64_t last_seq) {
  return snapshot_dir(prefix) + seq_text(last_seq);
}

std::optional<uint64_t> key_seq(const std::string& dir, const std::string& key) {
  if (key.size() != dir.size() + 16 || key.compare(0, dir.size(), dir) != 0) return std::nullopt;
  uint64_t v = 0;
  for (size_t i = dir.size(); i < key.size(); ++i) {
    if (key[i] < '0' || key[i] > '9') return std::nullopt;
    v = v * 10 + uint64_t(key[i] - '0');
  }
  return v;
}

}  // namespace moerl::ledger::detail
