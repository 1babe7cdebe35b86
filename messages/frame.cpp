#include "messages/detail/frame.h"

namespace moerl::messages {

const char* kind_name(kind k) {
  switch (k) {
    case kind::work_unit: return "work_unit";
    case kind::lease: return "lease";
    case kind::lease_request: return "lease_request";
    case kind::unit_report: return "unit_report";
    case kind::sample: return "sample";
    case kind::sample_ack: return "sample_ack";
    case kind::credit: return "credit";
    case kind::batch_request: return "batch_request";
    case kind::batch: return "batch";
    case kind::weight_manifest: return "weight_manifest";
    case kind::heartbeat: return "heartbeat";
    case kind::interruption_notice: return "interruption_notice";
    case kind::admin_request: return "admin_request";
    case kind::admin_reply: return "admin_reply";
    case kind::metrics_snapshot: return "metrics_snapshot";
    case kind::error: return "error";
    case kind::lease_batch: return "lease_batch";
    case kind::lease_give_back: return "lease_give_back";
    case kind::prompt: return "prompt";
    case kind::ledger_events: return "ledger_events";
    case kind::shard_ack: return "shard_ack";
    case kind::trainer_claim: return "trainer_claim";
    case kind::trainer_claim_reply: return "trainer_claim_reply";
    case kind::shard_reports: return "shard_reports";
    case kind::shard_reports_reply: return "shard_reports_reply";
  }
  return "unknown";
}

result<kind> peek_kind(const void* data, size_t size, const decode_limits& lim) {
  return detail::check_header(data, size, lim);
}

namespace detail {

namespace {
constexpr char kMagic[4] = {'M', 'O', 'E', 1};
}

std::string frame(kind k, capnp::MessageBuilder& builder) {
  kj::Array<capnp::word> words = capnp::messageToFlatArray(builder);
  kj::ArrayPtr<const kj::byte> bytes = words.asBytes();
  std::string out(kHeaderBytes + bytes.size(), '\0');
  std::memcpy(out.data(), kMagic, sizeof(kMagic));
  const auto v = static_cast<uint16_t>(k);
  out[4] = static_cast<char>(v & 0xff);
  out[5] = static_cast<char>(v >> 8);
  std::memcpy(out.data() + kHeaderBytes, bytes.begin(), bytes.size());
  return out;
}

result<kind> check_header(const void* data, size_t size, const decode_limits& lim) {
  if (size > lim.max_bytes)
    return error{errc::message_too_large, "frame of " + std::to_string(size) +
                                              " bytes exceeds the maximum of " +
                                              std::to_string(lim.max_bytes)};
  if (data == nullptr || size < kHeaderBytes)
    return error{errc::truncated_message,
                 "frame of " + std::to_string(size) + " bytes is shorter than its 8-byte header"};
  const auto* p = static_cast<const unsigned char*>(data);
  if (std::memcmp(p, kMagic, 3) != 0)
    return error{errc::malformed_message, "bad frame magic (not a moerl message)"};
  if (p[3] != static_cast<unsigned char>(kMagic[3]))
    return error{errc::malformed_message, "unsupported frame version " + std::to_string(p[3])};
  if (p[6] != 0 || p[7] != 0)
    return error{errc::malformed_message, "reserved header bytes are not zero"};
  const uint16_t k = static_cast<uint16_t>(p[4] | (p[5] << 8));
  if (k == 0 || k > kMaxKind)
    return error{errc::malformed_message, "unknown message kind " + std::to_string(k)};
  return static_cast<kind>(k);
}

}  // namespace detail
}  // namespace moerl::messages
