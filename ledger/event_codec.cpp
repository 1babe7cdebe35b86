#include "ledger/event_codec.h"

namespace moerl::ledger {

// The two enums are kept value for value (ledger/types.h, messages/shard.h).
static_assert(static_cast<int>(ledger_event::kind::attempt_opened) ==
                  static_cast<int>(messages::ledger_event_kind::attempt_opened) &&
              static_cast<int>(ledger_event::kind::attempt_fenced) ==
                  static_cast<int>(messages::ledger_event_kind::attempt_fenced) &&
              static_cast<int>(ledger_event::kind::unit_committed) ==
                  static_cast<int>(messages::ledger_event_kind::unit_committed));

std::string encode_ledger_events(const std::vector<ledger_event>& events) {
  messages::ledger_events m;
  m.events.reserve(events.size());
  for (const auto& e : events)
    m.events.push_back({static_cast<messages::ledger_event_kind>(e.what), e.unit, e.attempt,
                        e.group_size, e.groups});
  return messages::encode(m);
}

result<std::vector<ledger_event>> decode_ledger_events(const std::string& bytes,
                                                       const std::string& shard) {
  auto m = messages::decode<messages::ledger_events>(bytes);
  if (!m) return m.err();
  std::vector<ledger_event> out;
  out.reserve(m->events.size());
  for (auto& e : m->events) {
    ledger_event x;
    x.what = static_cast<ledger_event::kind>(e.what);
    x.shard = shard;
    x.unit = e.unit;
    x.attempt = e.attempt;
    x.groups = std::move(e.groups);
    x.group_size = e.group_size;
    out.push_back(std::move(x));
  }
  return out;
}

std::string encode_shard_ack(const shard_ack& ack) {
  return messages::encode(
      messages::shard_ack{ack.unit, ack.attempt, ack.shard, ack.accepted_groups, ack.stale_groups});
}

result<shard_ack> decode_shard_ack(const std::string& bytes) {
  auto m = messages::decode<messages::shard_ack>(bytes);
  if (!m) return m.err();
  return shard_ack{m->unit, m->attempt, std::move(m->shard), std::move(m->accepted_groups),
                   std::move(m->stale_groups)};
}

}  // namespace moerl::ledger
