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

namespace {

// A shard ack alone (shard_ack) or in a list (shard_reports).
void write_ack(schema::ShardAck::Builder r, const shard_ack& m) {
  r.setUnit(m.unit);
  r.setAttempt(m.attempt);
  r.setShard(text(m.shard));
  fill(r.initAcceptedGroups(static_cast<unsigned>(m.accepted_groups.size())), m.accepted_groups);
  fill(r.initStaleGroups(static_cast<unsigned>(m.stale_groups.size())), m.stale_groups);
}

void read_ack(schema::ShardAck::Reader r, shard_ack& m) {
  m.unit = r.getUnit();
  m.attempt = r.getAttempt();
  m.shard = str(r.getShard());
  copy(m.accepted_groups, r.getAcceptedGroups());
  copy(m.stale_groups, r.getStaleGroups());
}

}  // namespace

template <>
std::string encode(const shard_ack& m) {
  capnp::MallocMessageBuilder b;
  write_ack(b.initRoot<schema::ShardAck>(), m);
  return frame(kind::shard_ack, b);
}
template <>
result<shard_ack> decode(const void* data, size_t size, const decode_limits& lim) {
  return decode_frame<schema::ShardAck, shard_ack>(
      kind::shard_ack, data, size, lim, [](schema::ShardAck::Reader r, shard_ack& m) -> status {
        read_ack(r, m);
        return {};
      });
}

template <>
std::string encode(const shard_reports& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<schema::ShardReports>();
  auto acks = r.initAcks(static_cast<unsigned>(m.acks.size()));
  for (unsigned i = 0; i < m.acks.size(); ++i) write_ack(acks[i], m.acks[i]);
  auto steps = r.initConsumed(static_cast<unsigned>(m.consumed.size()));
  for (unsigned i = 0; i < m.consumed.size(); ++i) {
    const consumption_step& c = m.consumed[i];
    steps[i].setUnit(c.unit);
    steps[i].setAttempt(c.attempt);
    steps[i].setGroup(c.group);
    steps[i].setNumSamples(c.num_samples);
    steps[i].setHandout(c.handout);
    steps[i].setStep(c.step);
  }
  return frame(kind::shard_reports, b);
}
template <>
result<shard_reports> decode(const void* data, size_t size, const decode_limits& lim) {
  return decode_frame<schema::ShardReports, shard_reports>(
      kind::shard_reports, data, size, lim,
      [](schema::ShardReports::Reader r, shard_reports& m) -> status {
        m.acks.resize(r.getAcks().size());
        for (unsigned i = 0; i < m.acks.size(); ++i) read_ack(r.getAcks()[i], m.acks[i]);
        m.consumed.reserve(r.getConsumed().size());
        for (auto c : r.getConsumed())
          m.consumed.push_back({c.getUnit(), c.getAttempt(), c.getGroup(), c.getNumSamples(),
                                c.getHandout(), c.getStep()});
        return {};
      });
}

template <>
std::string encode(const shard_reports_reply& m) {
  capnp::MallocMessageBuilder b;
  auto list =
      b.initRoot<schema::ShardReportsReply>().initErrors(static_cast<unsigned>(m.errors.size()));
  for (unsigned i = 0; i < m.errors.size(); ++i) list.set(i, text(m.errors[i]));
  return frame(kind::shard_reports_reply, b);
}
template <>
result<shard_reports_reply> decode(const void* data, size_t size, const decode_limits& lim) {
  return decode_frame<schema::ShardReportsReply, shard_reports_reply>(
      kind::shard_reports_reply, data, size, lim,
      [](schema::ShardReportsReply::Reader r, shard_reports_reply& m) -> status {
        for (auto e : r.getErrors()) m.errors.push_back(str(e));
        return {};
      });
}

namespace {

void write_groups(capnp::List<schema::HandedGroup>::Builder list,
                  const std::vector<handed_group>& groups) {
  for (unsigned i = 0; i < groups.size(); ++i) {
    list[i].setUnit(groups[i].unit);
    list[i].setAttempt(groups[i].attempt);
    list[i].setGroup(groups[i].group);
    list[i].setHandout(groups[i].handout);
  }
}

void read_groups(capnp::List<schema::HandedGroup>::Reader list, std::vector<handed_group>& out) {
  out.reserve(list.size());
  for (auto g : list) out.push_back({g.getUnit(), g.getAttempt(), g.getGroup(), g.getHandout()});
}

}  // namespace

template <>
std::string encode(const trainer_claim& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<schema::TrainerClaim>();
  r.setConsumer(text(m.consumer));
  r.setIncarnation(m.incarnation);
  write_groups(r.initClaims(static_cast<unsigned>(m.claims.size())), m.claims);
  write_groups(r.initConfirmed(static_cast<unsigned>(m.confirmed.size())), m.confirmed);
  return frame(kind::trainer_claim, b);
}
template <>
result<trainer_claim> decode(const void* data, size_t size, const decode_limits& lim) {
  return decode_frame<schema::TrainerClaim, trainer_claim>(
      kind::trainer_claim, data, size, lim,
      [](schema::TrainerClaim::Reader r, trainer_claim& m) -> status {
        m.consumer = str(r.getConsumer());
        m.incarnation = r.getIncarnation();
        read_groups(r.getClaims(), m.claims);
        read_groups(r.getConfirmed(), m.confirmed);
        return {};
      });
}

template <>
std::string encode(const trainer_claim_reply& m) {
  capnp::MallocMessageBuilder b;
  auto list =
      b.initRoot<schema::TrainerClaimReply>().initGranted(static_cast<unsigned>(m.granted.size()));
  for (unsigned i = 0; i < m.granted.size(); ++i) list.set(i, m.granted[i]);
  return frame(kind::trainer_claim_reply, b);
}
template <>
result<trainer_claim_reply> decode(const void* data, size_t size, const decode_limits& lim) {
  return decode_frame<schema::TrainerClaimReply, trainer_claim_reply>(
      kind::trainer_claim_reply, data, size, lim,
      [](schema::TrainerClaimReply::Reader r, trainer_claim_reply& m) -> status {
        for (bool g : r.getGranted()) m.granted.push_back(g);
        return {};
      });
}

}  // namespace moerl::messages
