#include "actors/internal/coordinator_views.h"

#include <algorithm>
#include <map>

#include "actors/coordinator_core.h"

namespace moerl::actors {

using nlohmann::json;

namespace {

// The trainer's job figures (joined_trainer_job: the newest trainer's, its history lists
// completed from earlier incarnations), or an empty object before a trainer reported; `name`
// the node whose figures lead.
json trainer_job_stats(const coordinator_core& core, std::string* name) {
  std::vector<const json*> jobs;
  std::vector<const std::string*> names;
  for (const auto& [id, n] : core.nodes()) {
    if (n.role != node_role::trainer || !n.stats.is_object()) continue;
    auto job = n.stats.find("job");
    if (job == n.stats.end() || !job->is_object()) continue;
    jobs.push_back(&*job);
    names.push_back(&n.name);
  }
  size_t leader = 0;
  json out = joined_trainer_job(jobs, &leader);
  if (!jobs.empty()) *name = *names[leader];
  return out;
}

// Samples the trainer took per second of wall clock over its last few iterations (the ends
// of the first and last of them); 0 until two iterations ended.
double trainer_samples_per_s(const json& iterations) {
  constexpr size_t kWindow = 5;
  if (iterations.size() < 2) return 0;
  const size_t first = iterations.size() > kWindow ? iterations.size() - kWindow : 0;
  const int64_t t0 = iterations[first].value("end_unix_ms", int64_t{0});
  const int64_t t1 = iterations.back().value("end_unix_ms", int64_t{0});
  uint64_t samples = 0;
  for (size_t i = first + 1; i < iterations.size(); ++i)
    samples += iterations[i].value("samples", uint64_t{0});
  return t1 > t0 ? double(samples) * 1000.0 / double(t1 - t0) : 0;
}

}  // namespace

json iterations_json(const coordinator_core& core) {
  std::string trainer;
  const json job = trainer_job_stats(core, &trainer);
  // One entry per iteration: the reward curve's point with the same iteration's timings.
  std::map<uint64_t, json> by_iteration;
  for (const char* key : {"reward_curve", "iterations"}) {
    const json list = job.value(key, json::array());
    if (!list.is_array()) continue;
    for (const auto& p : list) {
      if (!p.is_object()) continue;
      json& e = by_iteration[p.value("iteration", uint64_t{0})];
      for (const auto& [k, v] : p.items()) e[k] = v;
    }
  }
  json list = json::array();
  const size_t skip =
      by_iteration.size() > kMaxViewIterations ? by_iteration.size() - kMaxViewIterations : 0;
  size_t i = 0;
  for (auto& [it, e] : by_iteration)
    if (i++ >= skip) list.push_back(std::move(e));
  json out{{"trainer", trainer},
           {"iterations", list},
           {"samples_per_s", trainer_samples_per_s(list)},
           {"num_iterations", by_iteration.size()}};
  for (const char* k : {"kind", "task", "difficulty", "reward_random", "reward_max",
                        "policy_version", "trainer_ep_ranks", "resumed_from_version"})
    if (job.contains(k)) out[k] = job[k];
  return out;
}

json ledger_json(const coordinator_core& core) {
  const auto& led = core.ledger();
  std::map<std::string, uint64_t> by_state{{"pending", 0}, {"leased", 0}, {"committed", 0}};
  // Attempts made in the current coordinator epoch ("0": never leased, "1", "2", ...).
  std::map<std::string, uint64_t> by_attempts;
  std::map<std::string, json> by_shard;
  uint64_t num_trained = 0;  // committed units every group of which a trainer took
  json recent = json::array();
  constexpr size_t kRecent = 40;
  const size_t n = led.num_units();
  for (size_t u = 1; u <= n; ++u) {
    auto v = led.find(u);
    if (!v) continue;
    const std::string state = ledger::unit_state_name(v->state);
    ++by_state[state];
    ++by_attempts[std::to_string(ledger::attempt_counter(v->attempt))];
    const bool trained = v->state == ledger::unit_state::committed && !v->groups.empty() &&
                         v->trained.size() == v->groups.size();
    num_trained += trained;
    if (!v->shard.empty()) {
      json& s = by_shard[v->shard];
      if (s.is_null()) s = json{{"pending", 0}, {"leased", 0}, {"committed", 0}};
      s[state] = s[state].get<uint64_t>() + 1;
    }
    if (u + kRecent > n)
      recent.push_back({{"unit", v->unit},
                        {"state", state},
                        {"attempt", v->attempt},
                        {"worker", v->worker},
                        {"shard", v->shard},
                        {"groups", v->groups.size()},
                        {"committed_groups", v->committed.size()},
                        {"trained_groups", v->trained.size()}});
  }
  return json{{"num_units", n},
              {"by_state", by_state},
              {"num_trained_units", num_trained},
              {"by_attempts", by_attempts},
              {"by_shard", by_shard},
              {"recent_units", recent},
              {"epoch", led.epoch()}};
}

std::optional<json> snapshot_view(const coordinator_core& core, const std::string& verb) {
  if (verb == "iterations") return iterations_json(core);
  if (verb == "interruptions") return core.interruptions();
  if (verb == "ledger") return ledger_json(core);
  if (verb == "snapshot")
    return json{{"status", core.status_json()},
                {"nodes", core.nodes_json()},
                {"iterations", iterations_json(core)},
                {"interruptions", core.interruptions()},
                {"ledger", ledger_json(core)},
                // The dashboard's groups view: members, incarnation, re-formations.
                {"groups", core.groups().groups_json()}};
  return std::nullopt;
}

}  // namespace moerl::actors
