#include <iterator>

#include "common/byte_codec.h"
#include "ledger/internal/journal_record.h"

namespace moerl::ledger::detail {

namespace {
// Drop reasons by on-disk code. Values are on disk: never renumber.
const char* const kReasons[] = {drop_reason::returned,          drop_reason::lease_expired,
                                drop_reason::worker_dead,       drop_reason::coordinator_restart,
                                drop_reason::stale_policy,      drop_reason::shard_lost,
                                drop_reason::trainer_lost_stale};
constexpr uint8_t kFirstType = uint8_t(record_type::epoch_begin);
constexpr uint8_t kLastType = uint8_t(record_type::consumer_lost);
}  // namespace

uint8_t drop_reason_code(const char* reason) {
  for (uint8_t i = 0; i < std::size(kReasons); ++i)
    if (std::string(kReasons[i]) == reason) return i;
  return 0;
}

const char* drop_reason_name(uint8_t code) { return kReasons[code]; }

std::string encode_record(const journal_record& r) {
  byte_writer w;
  w.u8(static_cast<uint8_t>(r.type));
  w.u64(r.seq);
  w.u32(r.epoch);
  w.u64(r.unit);
  w.u32(r.attempt);
  w.str(r.name);
  w.str(r.shard);
  w.i64(r.deadline);
  w.u8(r.reason);
  w.u64s(r.groups);
  w.u64s(r.groups2);
  return std::move(w.bytes());
}

result<journal_record> decode_record(const std::string& bytes) {
  byte_reader rd(bytes.data(), bytes.size());
  journal_record r;
  uint8_t t = rd.u8();
  r.seq = rd.u64();
  r.epoch = rd.u32();
  r.unit = rd.u64();
  r.attempt = rd.u32();
  r.name = rd.str();
  r.shard = rd.str();
  r.deadline = rd.i64();
  r.reason = rd.u8();
  r.groups = rd.u64s();
  r.groups2 = rd.u64s();
  if (!rd.ok() || !rd.at_end())
    return error(errc::malformed_message, "ledger journal: record does not decode");
  if (t < kFirstType || t > kLastType)
    return error(errc::malformed_message,
                 "ledger journal: unknown record type " + std::to_string(t));
  if (r.reason >= std::size(kReasons))
    return error(errc::malformed_message, "ledger journal: unknown drop reason code");
  r.type = static_cast<record_type>(t);
  return r;
}

}  // namespace moerl::ledger::detail
