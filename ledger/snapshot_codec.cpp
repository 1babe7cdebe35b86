#include "ledger/internal/snapshot_codec.h"

#include "common/byte_codec.h"

namespace moerl::ledger::detail {

std::string encode_snapshot(const work_ledger::state& st, const accounting& acct, uint32_t epoch,
                            uint64_t last_seq) {
  byte_writer w;
  // Format version 3 only adds the handed groups at the end; a snapshot with nothing handed
  // is written as version 2, byte for byte what the previous version wrote.
  // Version 4 appends the trainers' claims; written only when there is one to keep.
  bool any_handed = false, any_claim = !st.consumer_floor.empty() || acct.refused_claims > 0;
  for (const auto& [id, u] : st.units) {
    any_handed = any_handed || !u.handed.empty();
    any_claim = any_claim || !u.claimed.empty();
  }
  w.u32(any_claim ? 4 : any_handed ? 3 : 2);
  w.u64(last_seq);
  w.u32(epoch);
  w.u64(st.next_unit);
  w.u64(st.rr);
  w.u32(uint32_t(st.shards.size()));
  for (const auto& s : st.shards) {
    w.str(s);
    w.u64(st.occupied.at(s));
  }
  w.u64s(std::vector<uint64_t>(st.pending.begin(), st.pending.end()));
  w.u64(acct.dispatched);
  w.u64(acct.committed);
  w.u64(acct.in_flight);
  w.u64(acct.lost);
  w.u64(acct.duplicated);
  w.u64(acct.trained);
  w.u32(uint32_t(acct.dropped.size()));
  for (const auto& [reason, n] : acct.dropped) {
    w.str(reason);
    w.u64(n);
  }
  w.u64(st.units.size());
  for (const auto& [id, u] : st.units) {
    w.u64(u.id);
    w.u64s(u.groups);
    w.u8(uint8_t(u.state));
    w.u32(u.attempt);
    w.str(u.worker);
    w.str(u.shard);
    w.i64(u.deadline);
    w.u8(uint8_t(u.reported) | uint8_t(u.acked) << 1);
    w.u64s(u.ack_accepted);
    w.u64s(u.ack_stale);
    w.u64s(u.todo);
    w.u64s(std::vector<uint64_t>(u.committed.begin(), u.committed.end()));
    std::vector<uint64_t> trained, handouts;
    for (const auto& [grp, handout] : u.trained) {
      trained.push_back(grp);
      handouts.push_back(handout);
    }
    w.u64s(trained);
    w.u64s(handouts);
  }
  if (any_handed || any_claim) {
    w.u64(acct.handed);
    uint64_t n = 0;
    for (const auto& [id, u] : st.units) n += !u.handed.empty();
    w.u64(n);
    for (const auto& [id, u] : st.units) {
      if (u.handed.empty()) continue;
      std::vector<uint64_t> groups, handouts;
      for (const auto& [grp, handout] : u.handed) {
        groups.push_back(grp);
        handouts.push_back(handout);
      }
      w.u64(id);
      w.u64s(groups);
      w.u64s(handouts);
    }
  }
  if (any_claim) {
    w.u64(acct.refused_claims);
    w.u32(uint32_t(st.consumer_floor.size()));
    for (const auto& [name, floor] : st.consumer_floor) {
      w.str(name);
      w.u64(floor);
    }
    uint64_t n = 0;
    for (const auto& [id, u] : st.units) n += u.claimed.size();
    w.u64(n);
    for (const auto& [id, u] : st.units)
      for (const auto& [grp, c] : u.claimed) {
        w.u64(id);
        w.u64(grp);
        w.str(c.by.name);
        w.u64(c.by.incarnation);
        w.u32(c.attempt);
        w.str(c.shard);
      }
  }
  return std::move(w.bytes());
}

status decode_snapshot(const std::string& bytes, work_ledger::state& st, accounting& acct,
                       uint32_t& epoch, uint64_t& last_seq) {
  byte_reader rd(bytes.data(), bytes.size());
  auto bad = [](const std::string& what) {
    return error(errc::malformed_message, "ledger snapshot: " + what);
  };
  const uint32_t version = rd.u32();
  if (version < 1 || version > 4) return bad("unknown format version");
  last_seq = rd.u64();
  epoch = rd.u32();
  st.next_unit = rd.u64();
  st.rr = rd.u64();
  uint32_t ns = rd.u32();
  for (uint32_t i = 0; i < ns && rd.ok(); ++i) {
    std::string s = rd.str();
    st.occupied[s] = rd.u64();
    st.shards.push_back(s);
  }
  auto pend = rd.u64s();
  st.pending.assign(pend.begin(), pend.end());
  acct.dispatched = rd.u64();
  acct.committed = rd.u64();
  acct.in_flight = rd.u64();
  acct.lost = rd.u64();
  acct.duplicated = rd.u64();
  acct.trained = rd.u64();
  uint32_t nd = rd.u32();
  for (uint32_t i = 0; i < nd && rd.ok(); ++i) {
    std::string reason = rd.str();
    acct.dropped[reason] = rd.u64();
  }
  uint64_t nu = rd.u64();
  if (!rd.ok() || nu > rd.remaining()) return bad("truncated header");
  for (uint64_t i = 0; i < nu && rd.ok(); ++i) {
    unit_rec u;
    u.id = rd.u64();
    u.groups = rd.u64s();
    uint8_t s = rd.u8();
    if (s > 2) return bad("unknown unit state");
    u.state = unit_state(s);
    u.attempt = rd.u32();
    u.worker = rd.str();
    u.shard = rd.str();
    u.deadline = rd.i64();
    uint8_t flags = rd.u8();
    u.reported = flags & 1;
    u.acked = flags & 2;
    u.ack_accepted = rd.u64s();
    u.ack_stale = rd.u64s();
    u.todo = rd.u64s();
    auto c = rd.u64s();
    u.committed.insert(c.begin(), c.end());
    auto t = rd.u64s();
    std::vector<uint64_t> handouts = version >= 2 ? rd.u64s() : std::vector<uint64_t>(t.size(), 0);
    if (handouts.size() != t.size()) return bad("trained groups and hand-out ids differ in number");
    for (size_t k = 0; k < t.size(); ++k) u.trained.emplace(t[k], handouts[k]);
    st.units.emplace(u.id, std::move(u));
  }
  if (version >= 3 && rd.ok()) {
    acct.handed = rd.u64();
    const uint64_t n = rd.u64();
    if (!rd.ok() || n > rd.remaining()) return bad("truncated handed groups");
    for (uint64_t i = 0; i < n && rd.ok(); ++i) {
      const uint64_t id = rd.u64();
      auto groups = rd.u64s();
      auto handouts = rd.u64s();
      auto u = st.units.find(id);
      if (!rd.ok()) break;
      if (u == st.units.end())
        return bad("handed groups of unit " + std::to_string(id) + ", which does not exist");
      if (groups.size() != handouts.size())
        return bad("handed groups and hand-out ids differ in number");
      for (size_t k = 0; k < groups.size(); ++k) u->second.handed.emplace(groups[k], handouts[k]);
    }
  }
  if (version >= 4 && rd.ok()) {
    acct.refused_claims = rd.u64();
    const uint32_t nf = rd.u32();
    for (uint32_t i = 0; i < nf && rd.ok(); ++i) {
      std::string name = rd.str();
      st.consumer_floor[name] = rd.u64();
    }
    const uint64_t n = rd.u64();
    if (!rd.ok() || n > rd.remaining()) return bad("truncated claims");
    for (uint64_t i = 0; i < n && rd.ok(); ++i) {
      const uint64_t id = rd.u64();
      const uint64_t grp = rd.u64();
      claim_rec c;
      c.by.name = rd.str();
      c.by.incarnation = rd.u64();
      c.attempt = rd.u32();
      c.shard = rd.str();
      if (!rd.ok()) break;
      auto u = st.units.find(id);
      if (u == st.units.end() || !u->second.handed.count(grp))
        return bad("a claim on unit " + std::to_string(id) + " group " + std::to_string(grp) +
                   ", which is not handed");
      u->second.claimed.emplace(grp, std::move(c));
    }
  }
  if (!rd.ok() || !rd.at_end()) return bad("does not decode");
  rebuild_unit_indexes(st);
  // The CRC guards against damage; these guard the rest of the ledger against a snapshot
  // that decodes but names things that do not exist.
  for (auto id : st.pending)
    if (!st.units.count(id)) return bad("pending unit " + std::to_string(id) + " does not exist");
  for (const auto& [id, u] : st.units) {
    if (id >= st.next_unit) return bad("unit " + std::to_string(id) + " >= next unit id");
    if (u.state == unit_state::leased && u.todo.empty())
      return bad("leased unit " + std::to_string(id) + " has no groups to generate");
  }
  return ok_status();
}

}  // namespace moerl::ledger::detail
