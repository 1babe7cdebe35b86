#include "messages/detail/frame.h"
#include "messages/shard.capnp.h"
#include "messages/shard.h"

namespace moerl::messages {
using namespace detail;

template <>
std::string encode(const ledger_events& m) {
  capnp::MallocMessageBuilder b;
  auto list = b.initRoot<schema::LedgerEvents>().initEvents(static_cast<unsigned>(m.events.size()));
  for (unsigned i = 0; i < m.events.size(); ++i) {
    const ledger_event& e = m.events[i];
    auto w = list[i];
    w.setKind(static_cast<schema::LedgerEvent::Kind>(e.what));
    w.setUnit(e.unit);
    w.setAttempt(e.attempt);
    w.setGroupSize(e.group_size);
    fill(w.initGroups(static_cast<unsigned>(e.groups.size())), e.groups);
  }
  return frame(kind::ledger_events, b);
}
template <>
result<ledger_events> decode(const void* data, size_t size, const decode_limits& lim) {
  return decode_frame<schema::LedgerEvents, ledger_events>(
      kind::ledger_events, data, size, lim,
      [](schema::LedgerEvents::Reader r, ledger_events& m) -> status {
        auto list = r.getEvents();
        m.events.reserve(list.size());
        for (unsigned i = 0; i < list.size(); ++i) {
          const auto k = static_cast<uint16_t>(list[i].getKind());
          if (k > static_cast<uint16_t>(ledger_event_kind::unit_committed))
            return error{errc::malformed_message, "ledger event " + std::to_string(i) +
                                                      ": unknown kind " + std::to_string(k)};
          ledger_event e;
          e.what = static_cast<ledger_event_kind>(k);
          e.unit = list[i].getUnit();
          e.attempt = list[i].getAttempt();
          e.group_size = list[i].getGroupSize();
          copy(e.groups, list[i].getGroups());
          m.events.push_back(std::move(e));
        }
        return {};
      });
}

template <>
std::string encode(const shard_ack& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<schema::ShardAck>();
  r.setUnit(m.unit);
  r.setAttempt(m.attempt);
  r.setShard(text(m.shard));
  fill(r.initAcceptedGroups(static_cast<unsigned>(m.accepted_groups.size())), m.accepted_groups);
  fill(r.initStaleGroups(static_cast<unsigned>(m.stale_groups.size())), m.stale_groups);
  return frame(kind::shard_ack, b);
}
template <>
result<shard_ack> decode(const void* data, size_t size, const decode_limits& lim) {
  return decode_frame<schema::ShardAck, shard_ack>(
      kind::shard_ack, data, size, lim, [](schema::ShardAck::Reader r, shard_ack& m) -> status {
        m.unit = r.getUnit();
        m.attempt = r.getAttempt();
        m.shard = str(r.getShard());
        copy(m.accepted_groups, r.getAcceptedGroups());
        copy(m.stale_groups, r.getStaleGroups());
        return {};
      });
}

}  // namespace moerl::messages
