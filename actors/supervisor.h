// OTP-style supervision for CAF 0.17, which has links, exit trapping and monitors but no
// supervisor (CAF-0.17-NOTES §6, §10). One supervisor per node:
//   - one_for_one for rollout, reward and env actors (independent of each other);
//   - one_for_all for the ranks of one trainer group (they are synchronous: if one rank
//     dies the others are stuck in a collective, so all restart together).
// Restart policies: permanent (always), transient (only after an abnormal exit), temporary
// (never). More than `intensity` restarts inside `period_ms` make the supervisor give up and
// exit with errc-style reason "max restart intensity" (escalation, as OTP does), instead of
// burning CPU in a crash loop. Each restart waits an exponential backoff (base * 2^k, capped),
// because a Spot reclaim takes many peers at once and capacity returns slowly.
// Every restart's reason is logged and counted, and sent to an optional observer as
// (restarted_atom, child_id, reason, total_restarts).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

namespace moerl::actors {

enum class restart_strategy { one_for_one, one_for_all };
enum class restart_policy { permanent, transient, temporary };

struct child_spec {
  std::string id;
  // Spawns the child; called again for every restart. The supervisor links to it.
  std::function<caf::actor(caf::actor_system&)> start;
  restart_policy policy = restart_policy::permanent;
};

struct supervisor_options {
  std::string name = "supervisor";
  restart_strategy strategy = restart_strategy::one_for_one;
  int64_t intensity = 5;  // restarts allowed within period_ms
  int64_t period_ms = 10000;
  int64_t backoff_ms = 100;  // first restart delay
  int64_t backoff_max_ms = 5000;
  caf::actor observer;  // optional: receives restarted_atom notifications
};

// Spawns the supervisor and its children (in list order). Ask it (stats_atom) for a JSON
// string {"restarts": n, "children": {id: {"restarts": n, "last_reason": "..."}}}.
// Sending it (crash_atom, child_id) kills that child with a reason naming the request
// (used by the console's `kill` and by tests).
caf::actor spawn_supervisor(caf::actor_system& sys, supervisor_options opts,
                            std::vector<child_spec> children);

// The children currently running, for callers that must talk to them:
// reply to (ping_atom) is std::vector<caf::actor> in spec order (dead slots are invalid).

}  // namespace moerl::actors
