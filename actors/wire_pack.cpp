#include "actors/wire_pack.h"

namespace moerl::actors {

std::string pack_u64s(const std::vector<uint64_t>& v) {
  std::string out;
  out.reserve(v.size() * 8);
  for (uint64_t x : v)
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((x >> (8 * i)) & 0xff));
  return out;
}

result<std::vector<uint64_t>> unpack_u64s(const std::string& bytes) {
  if (bytes.size() % 8 != 0)
    return error(errc::malformed_message, "packed u64 list of " + std::to_string(bytes.size()) +
                                              " bytes is not a multiple of 8");
  std::vector<uint64_t> v(bytes.size() / 8);
  for (size_t k = 0; k < v.size(); ++k) {
    uint64_t x = 0;
    for (int i = 0; i < 8; ++i) x |= uint64_t(static_cast<unsigned char>(bytes[8 * k + i])) << (8 * i);
    v[k] = x;
  }
  return v;
}

namespace {

void put(std::string& out, uint64_t x, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((x >> (8 * i)) & 0xff));
}

// Reads little-endian integers from untrusted bytes; `ok` turns false at the first overrun.
struct byte_cursor {
  const std::string& b;
  size_t at = 0;
  bool ok = true;
  uint64_t get(int bytes) {
    if (!ok || b.size() - at < size_t(bytes)) {
      ok = false;
      return 0;
    }
    uint64_t x = 0;
    for (int i = 0; i < bytes; ++i) x |= uint64_t(static_cast<unsigned char>(b[at + i])) << (8 * i);
    at += bytes;
    return x;
  }
};

}  // namespace

std::string pack_ledger_events(const std::vector<ledger::ledger_event>& events) {
  std::string out;
  for (const auto& e : events) {
    put(out, static_cast<uint8_t>(e.what), 1);
    put(out, e.unit, 8);
    put(out, e.attempt, 4);
    put(out, e.group_size, 4);
    put(out, e.groups.size(), 4);
    for (auto g : e.groups) put(out, g, 8);
  }
  return out;
}

result<std::vector<ledger::ledger_event>> unpack_ledger_events(const std::string& bytes, const std::string& shard) {
  std::vector<ledger::ledger_event> out;
  byte_cursor c{bytes};
  while (c.ok && c.at < bytes.size()) {
    ledger::ledger_event e;
    const uint64_t kind = c.get(1);
    if (kind > static_cast<uint8_t>(ledger::ledger_event::kind::unit_committed))
      return error(errc::malformed_message, "ledger event " + std::to_string(out.size()) + ": unknown kind " +
                                                std::to_string(kind));
    e.what = static_cast<ledger::ledger_event::kind>(kind);
    e.shard = shard;
    e.unit = c.get(8);
    e.attempt = static_cast<ledger::attempt_t>(c.get(4));
    e.group_size = static_cast<uint32_t>(c.get(4));
    const uint64_t n = c.get(4);
    if (!c.ok || n > (bytes.size() - c.at) / 8)
      return error(errc::malformed_message, "ledger event " + std::to_string(out.size()) + " is truncated");
    e.groups.resize(n);
    for (auto& g : e.groups) g = c.get(8);
    out.push_back(std::move(e));
  }
  if (!c.ok) return error(errc::malformed_message, "ledger event " + std::to_string(out.size()) + " is truncated");
  return out;
}

}  // namespace moerl::actors
