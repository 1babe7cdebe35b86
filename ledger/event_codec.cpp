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

std::string encode_shard_reports(const std::vector<shard_ack>& acks,
                                 const std::vector<consumption>& consumed) {
  messages::shard_reports m;
  m.acks.reserve(acks.size());
  for (const auto& a : acks)
    m.acks.push_back({a.unit, a.attempt, a.shard, a.accepted_groups, a.stale_groups});
  m.consumed.reserve(consumed.size());
  for (const auto& c : consumed)
    m.consumed.push_back(
        {c.unit, c.attempt, c.group, c.num_samples, c.handout, static_cast<uint8_t>(c.step)});
  return messages::encode(m);
}

result<shard_reports> decode_shard_reports(const std::string& bytes) {
  auto m = messages::decode<messages::shard_reports>(bytes);
  if (!m) return m.err();
  shard_reports out;
  out.acks.reserve(m->acks.size());
  for (auto& a : m->acks)
    out.acks.push_back({a.unit, a.attempt, std::move(a.shard), std::move(a.accepted_groups),
                        std::move(a.stale_groups)});
  out.consumed.reserve(m->consumed.size());
  for (size_t i = 0; i < m->consumed.size(); ++i) {
    const auto& c = m->consumed[i];
    if (c.step > static_cast<uint8_t>(handout_step::dropped))
      return error(errc::malformed_message, "hand-out step " + std::to_string(i) +
                                                ": unknown step " + std::to_string(c.step));
    out.consumed.push_back(
        {c.unit, c.attempt, c.group, c.num_samples, c.handout, static_cast<handout_step>(c.step)});
  }
  return out;
}

}  // namespace moerl::ledger
