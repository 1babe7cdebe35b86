#include "actors/internal/trainer_claim.h"

#include <set>
#include <tuple>

#include <caf/all.hpp>

#include "actors/atoms.h"
#include "actors/internal/role_loops.h"
#include "common/log.h"
#include "common/status_try.h"

namespace moerl::actors {

result<std::vector<messages::handed_group>> handed_groups_of(const messages::batch& b) {
  std::vector<messages::handed_group> groups;
  std::set<std::tuple<uint64_t, uint32_t, uint64_t>> seen;
  for (const auto& s : b.samples) {
    if (!groups.empty() && groups.back().unit == s.work_unit &&
        groups.back().attempt == s.attempt && groups.back().group == s.group_id)
      continue;
    if (!seen.emplace(s.work_unit, s.attempt, s.group_id).second)
      return error(errc::malformed_message, "batch " + std::to_string(b.batch_id) + " of shard " +
                                                b.shard + ": the samples of group " +
                                                std::to_string(s.group_id) + " are not together");
    groups.push_back({s.work_unit, s.attempt, s.group_id, 0});
  }
  if (groups.size() != b.handouts.size())
    return error(errc::malformed_message, "batch " + std::to_string(b.batch_id) + " of shard " +
                                              b.shard + ": " + std::to_string(groups.size()) +
                                              " groups but " + std::to_string(b.handouts.size()) +
                                              " hand-out ids");
  for (size_t i = 0; i < groups.size(); ++i) groups[i].handout = b.handouts[i];
  return groups;
}

std::vector<messages::sample> granted_samples(const messages::batch& b,
                                              const std::vector<messages::handed_group>& groups,
                                              const std::vector<bool>& granted) {
  std::set<std::tuple<uint64_t, uint32_t, uint64_t>> ok;
  for (size_t i = 0; i < groups.size() && i < granted.size(); ++i)
    if (granted[i]) ok.emplace(groups[i].unit, groups[i].attempt, groups[i].group);
  std::vector<messages::sample> out;
  out.reserve(b.samples.size());
  for (const auto& s : b.samples)
    if (ok.count({s.work_unit, s.attempt, s.group_id})) out.push_back(s);
  return out;
}

result<std::vector<bool>> claim_groups(caf::blocking_actor* self, node_context& ctx,
                                       const std::vector<messages::handed_group>& claims,
                                       const std::vector<messages::handed_group>& confirmed) {
  messages::trainer_claim c{ctx.name, ctx.trainer_incarnation, claims, confirmed};
  const std::string bytes = messages::encode(c);
  int64_t last_warn = 0;
  while (mailbox_ok(self, ctx, 0) && !ctx.draining()) {
    auto raw = call_coordinator(self, ctx, caf::make_message(claim_atom::value, bytes));
    if (!raw) {
      // No answer (the coordinator restarts, the link is down): ask again; the ledger takes
      // a repeated claim once. Refusals of a claim come as grants, not as an error.
      if (raw.err().code == errc::timeout || raw.err().code == errc::peer_dead) {
        if (steady_ms() - last_warn > 5000) {
          last_warn = steady_ms();
          logger("trainer")->warn("claim of {} group(s): {}; asking again", claims.size(),
                                  raw.err().message);
        }
        if (!mailbox_ok(self, ctx, 100)) break;
        continue;
      }
      return raw.err();
    }
    ASSIGN_OR_RETURN(auto rep, messages::decode<messages::trainer_claim_reply>(*raw));
    if (rep.granted.size() != claims.size())
      return error(errc::malformed_message, "claim reply: " + std::to_string(rep.granted.size()) +
                                                " grants for " + std::to_string(claims.size()) +
                                                " groups");
    return std::move(rep.granted);
  }
  return error(errc::shutting_down, "the trainer stops: claim not answered");
}

}  // namespace moerl::actors
