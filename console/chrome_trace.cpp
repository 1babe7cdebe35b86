#include "console/chrome_trace.h"

#include <cstdlib>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace moerl::console {

using nlohmann::json;

namespace {

constexpr int kPid = 1;

json complete(const std::string& name, const std::string& cat, int tid, double ts_us, double dur_us,
              json args) {
  return json{{"name", name},
              {"cat", cat},
              {"ph", "X"},
              {"pid", kPid},
              {"tid", tid},
              {"ts", ts_us},
              {"dur", std::max(0.0, dur_us)},
              {"args", std::move(args)}};
}

}  // namespace

json chrome_trace(const json& snapshot) {
  json events = json::array();
  const json nodes = snapshot.value("nodes", json::array());
  const json its = snapshot.value("iterations", json::object());
  const json list = its.value("iterations", json::array());
  // One lane per node, in the nodes view's order; lane names as thread_name metadata.
  std::map<std::string, int> lane;                     // node name -> tid
  std::map<std::string, std::vector<int>> role_lanes;  // role -> tids
  events.push_back({{"name", "process_name"},
                    {"ph", "M"},
                    {"pid", kPid},
                    {"tid", 0},
                    {"args", {{"name", "moerl job " + its.value("task", std::string())}}}});
  int tid = 1;
  for (const auto& n : nodes) {
    const std::string name = n.value("name", std::string());
    if (lane.count(name)) continue;
    lane[name] = tid;
    role_lanes[n.value("role", std::string())].push_back(tid);
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", kPid},
                      {"tid", tid},
                      {"args", {{"name", name + " (" + n.value("role", std::string()) + ")"}}}});
    ++tid;
  }
  // Times relative to the first iteration's start, in microseconds.
  int64_t origin_ms = -1;
  const std::string trainer = its.value("trainer", std::string());
  const int trainer_tid = lane.count(trainer) ? lane[trainer] : 0;
  double prev_end_us = -1;
  for (const auto& it : list) {
    const int64_t end_ms = it.value("end_unix_ms", int64_t{0});
    if (end_ms == 0) continue;  // a trainer without step end times (older job): no placement
    const double t_buffer = it.value("t_buffer", 0.0), t_train = it.value("t_train", 0.0),
                 t_weights = it.value("t_weights", 0.0),
                 t_checkpoint = it.value("t_checkpoint", 0.0);
    const double span_s = t_buffer + t_train + t_weights + t_checkpoint;
    if (origin_ms < 0) origin_ms = end_ms - static_cast<int64_t>(span_s * 1000.0);
    const double end_us = double(end_ms - origin_ms) * 1000.0;
    const uint64_t v = it.value("iteration", uint64_t{0});
    json args{{"iteration", v},
              {"mean_reward", it.value("mean_reward", 0.0)},
              {"samples", it.value("samples", 0)},
              {"staleness", it.value("staleness", 0.0)}};
    // The trainer's phases end to end, backwards from the step's end.
    double t = end_us - span_s * 1e6;
    for (const auto& [phase, dur_s] :
         std::vector<std::pair<const char*, double>>{{"buffer", t_buffer},
                                                     {"train", t_train},
                                                     {"weights publish", t_weights},
                                                     {"checkpoint", t_checkpoint}}) {
      if (dur_s > 0)
        events.push_back(complete(phase, "trainer", trainer_tid, t, dur_s * 1e6, args));
      t += dur_s * 1e6;
    }
    // Generation, environment steps and reward: their summed time, shared evenly among the
    // role's lanes, from the previous step's end (when this iteration's policy became current).
    const double from_us = prev_end_us >= 0 ? prev_end_us : end_us - span_s * 1e6;
    for (const auto& [role, key, phase] :
         std::vector<std::tuple<const char*, const char*, const char*>>{
             {"rollout", "t_generate", "generate"},
             {"env", "t_env", "env"},
             {"reward", "t_reward", "reward"}}) {
      const auto& tids = role_lanes[role];
      const double sum_s = it.value(key, 0.0);
      if (tids.empty() || sum_s <= 0) continue;
      const double each_us = std::min(sum_s * 1e6 / double(tids.size()), end_us - from_us);
      json a = args;
      a["sum_s"] = sum_s;
      a["attributed"] = "sum over the iteration's samples, divided evenly among " +
                        std::to_string(tids.size()) + " " + role + " node(s)";
      for (int l : tids) events.push_back(complete(phase, role, l, from_us, each_us, a));
    }
    prev_end_us = end_us;
  }
  // Weight redistribution, measured per node: version v from its announcement (the end of the
  // step that made it) until this node held it (its weight feed's `held_unix_ms`, in the
  // node's stats), on the node's own lane.
  std::map<uint64_t, int64_t> announced_ms;
  for (const auto& it : list)
    if (it.value("end_unix_ms", int64_t{0}) > 0)
      announced_ms[it.value("iteration", uint64_t{0})] = it.value("end_unix_ms", int64_t{0});
  for (const auto& n : nodes) {
    const json held = n.value("stats", json::object())
                          .value("weights", json::object())
                          .value("held_unix_ms", json::object());
    const std::string name = n.value("name", std::string());
    if (!held.is_object() || origin_ms < 0 || !lane.count(name)) continue;
    for (const auto& [key, at] : held.items()) {
      const uint64_t v = std::strtoull(key.c_str(), nullptr, 10);
      auto from = announced_ms.find(v);
      if (from == announced_ms.end() || !at.is_number_integer()) continue;
      const int64_t held_ms = at.get<int64_t>();
      if (held_ms < from->second) continue;  // held before this trainer's figure (a resume)
      events.push_back(complete(
          "weights fetch", "weights", lane[name], double(from->second - origin_ms) * 1000.0,
          double(held_ms - from->second) * 1000.0, {{"version", v}, {"node", name}}));
    }
  }
  for (const auto& r : snapshot.value("interruptions", json::array())) {
    if (!r.is_object() || origin_ms < 0) continue;
    const int64_t at = r.value("at", int64_t{0});
    if (at == 0) continue;
    const std::string node = r.value("node", std::string());
    events.push_back({{"name", "interruption: " + r.value("source", std::string("notice"))},
                      {"cat", "interruption"},
                      {"ph", "i"},
                      {"s", "t"},
                      {"pid", kPid},
                      {"tid", lane.count(node) ? lane[node] : 0},
                      {"ts", double(at - origin_ms) * 1000.0},
                      {"args", r}});
  }
  return json{{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

}  // namespace moerl::console
