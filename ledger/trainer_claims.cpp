// Claimed before trained (ledger/LEDGER.md): a trainer asks the ledger before its step uses
// a batch, so a group the ledger re-opened after its shard was declared lost is never trained
// as well, and a group a trainer holds is not re-opened when its shard is lost.
#include <algorithm>

#include "ledger/internal/ledger_state.h"
#include "ledger/work_ledger.h"

namespace moerl::ledger {

using namespace detail;

namespace {

journal_record claim_record(record_type type, const consumer_ref& by, const consumption& c) {
  journal_record r = consumption_record(type, c);
  r.name = by.name;
  r.deadline = static_cast<int64_t>(by.incarnation);
  return r;
}

bool same_consumer(const consumer_ref& a, const consumer_ref& b) {
  return a.name == b.name && a.incarnation == b.incarnation;
}

}  // namespace

bool work_ledger::claimable(const unit_rec& u, const consumer_ref& by, const consumption& c,
                            std::string* why) const {
  auto no = [&](const char* reason) {
    *why = reason;
    return false;
  };
  if (!u.committed.count(c.group) || u.trained.count(c.group) || u.attempt != c.attempt)
    return no("not a committed, untrained group of the current attempt (re-opened?)");
  auto h = u.handed.find(c.group);
  if (h == u.handed.end()) return true;  // the shard's `handed` step has not arrived yet
  auto cl = u.claimed.find(c.group);
  if (h->second == c.handout)
    return cl == u.claimed.end() ? true : no("claimed by another consumer under that hand-out");
  // Handed under another id: an earlier hand-out of the group whose consumer was lost before
  // claiming it (its shard then served it again, to `by`), or a claim of a lost predecessor.
  if (h->second > c.handout) return no("handed again after that hand-out");
  if (cl == u.claimed.end()) return true;
  if (cl->second.by.name == by.name && cl->second.by.incarnation < by.incarnation) return true;
  return no("claimed by another consumer");
}

result<std::vector<bool>> work_ledger::claim(const consumer_ref& by,
                                             const std::vector<consumption>& groups) {
  if (by.name.empty() || by.incarnation == 0)
    return error(errc::invalid_argument,
                 "claim: a claiming trainer needs a name and an incarnation > 0");
  // A newer incarnation than any before: the older ones are lost (the same rule as a shard
  // applies to its requests).
  auto floor = st_->consumer_floor.find(by.name);
  if (floor == st_->consumer_floor.end() || floor->second < by.incarnation) {
    auto lost = consumer_lost(by.name, by.incarnation - 1);
    if (!lost) return lost.err();
  }
  const bool fenced = st_->consumer_floor[by.name] > by.incarnation;
  std::vector<bool> out;
  out.reserve(groups.size());
  for (const auto& c : groups) {
    auto found = consumed_unit(c);
    if (!found) {
      out.push_back(false);  // not a group of this ledger: nothing to record
      continue;
    }
    const unit_rec& u = **found;
    auto cl = u.claimed.find(c.group);
    if (!fenced && cl != u.claimed.end() && same_consumer(cl->second.by, by) &&
        cl->second.attempt == c.attempt && u.handed.at(c.group) == c.handout) {
      out.push_back(true);  // claimed again (a reply was lost): already recorded
      continue;
    }
    std::string why;
    const bool ok = !fenced && claimable(u, by, c, &why);
    auto s = append(claim_record(ok ? record_type::claimed : record_type::claim_refused, by, c));
    if (!s) return s.err();
    out.push_back(ok);
  }
  return out;
}

result<uint64_t> work_ledger::confirm_claimed(const consumer_ref& by,
                                              const std::vector<consumption>& groups) {
  uint64_t trained = 0;
  for (const auto& c : groups) {
    auto found = consumed_unit(c);
    if (!found) continue;
    const unit_rec& u = **found;
    auto cl = u.claimed.find(c.group);
    auto h = u.handed.find(c.group);
    if (cl == u.claimed.end() || h == u.handed.end() || !same_consumer(cl->second.by, by) ||
        cl->second.attempt != c.attempt || h->second != c.handout || !claim_live(*st_, u, c.group))
      continue;
    auto s = append(consumption_record(record_type::trained, c));
    if (!s) return s.err();
    ++trained;
  }
  return trained;
}

result<std::vector<unit_id>> work_ledger::consumer_lost(const std::string& name, uint64_t bound) {
  if (name.empty()) return error(errc::invalid_argument, "consumer_lost: no consumer name");
  const std::set<unit_id> before = pending_ids();
  journal_record r;
  r.type = record_type::consumer_lost;
  r.name = name;
  r.deadline = static_cast<int64_t>(bound);
  auto s = append(r);
  if (!s) return s.err();
  std::vector<unit_id> reopened;
  for (auto id : pending_ids())
    if (!before.count(id)) reopened.push_back(id);
  return reopened;
}

}  // namespace moerl::ledger
