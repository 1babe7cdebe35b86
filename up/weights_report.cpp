#include "up/weights_report.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/percentile.h"

namespace moerl::up {

using nlohmann::json;

namespace {

const json* weights_of(const json& node) {
  if (!node.is_object() || !node.contains("stats") || !node["stats"].is_object()) return nullptr;
  const json& st = node["stats"];
  auto it = st.find("weights");
  return it != st.end() && it->is_object() ? &*it : nullptr;
}

}  // namespace

json weights_report(const json& trainer_job, const json& nodes) {
  if (!trainer_job.is_object() || !trainer_job.contains("weights")) return nullptr;
  const json published = trainer_job["weights"].value("versions", json::array());
  json bytes_from{{"cache", 0}, {"peer", 0}, {"store", 0}};
  uint64_t failovers = 0, refetches = 0, store_fallbacks = 0, via_shm = 0;
  std::vector<const json*> readers;
  for (const auto& n : nodes) {
    if (n.value("role", "") != "rollout") continue;
    const json* w = weights_of(n);
    if (!w) continue;
    readers.push_back(w);
    const json from = w->value("bytes_from", json::object());
    for (const char* k : {"cache", "peer", "store"})
      bytes_from[k] = bytes_from[k].get<uint64_t>() + from.value(k, uint64_t{0});
    failovers += w->value("failovers", uint64_t{0});
    refetches += w->value("chunk_refetches", uint64_t{0});
    store_fallbacks += w->value("store_fallbacks", uint64_t{0});
    via_shm += w->value("bytes_via_shm", uint64_t{0});
  }
  json versions = json::array();
  for (const auto& p : published) {
    const uint64_t v = p.value("version", uint64_t{0});
    const int64_t readable = p.value("held_unix_ms", int64_t{0});
    std::vector<double> delays;
    // Where the rollout nodes read it from (each node's fetch of v: [cache, peer, store]).
    uint64_t from_v[3] = {0, 0, 0};
    for (const json* w : readers) {
      const std::string key = std::to_string(v);
      if (auto f = w->find("held_bytes_from"); f != w->end() && f->is_object()) {
        auto b = f->find(key);
        if (b != f->end() && b->is_array() && b->size() == 3)
          for (size_t k = 0; k < 3; ++k)
            if ((*b)[k].is_number_integer() && (*b)[k].get<int64_t>() > 0)
              from_v[k] += (*b)[k].get<uint64_t>();
      }
      const json held = w->value("held_unix_ms", json::object());
      auto it = held.find(key);
      if (it == held.end() || !it->is_number()) continue;
      // A node may hold a version before the trainer's clock says it was readable (clock
      // resolution, or skew across hosts): never a negative delay.
      delays.push_back(std::max(0.0, double(it->get<int64_t>() - readable) * 1e-3));
    }
    // No rollout node read it (a version superseded before anyone asked): no delay to
    // report, which is not a delay of 0.
    const json none = nullptr;
    json shard_bytes = p.value("shard_bytes", json::array());
    if (!shard_bytes.is_array() || shard_bytes.empty())
      shard_bytes = json::array({p.value("bytes", uint64_t{0})});
    uint64_t shard_max = 0;
    for (const auto& b : shard_bytes)
      if (b.is_number_unsigned()) shard_max = std::max(shard_max, b.get<uint64_t>());
    versions.push_back(
        {{"version", v},
         {"bytes", p.value("bytes", uint64_t{0})},
         {"via", p.value("via", std::string())},
         {"t_publish", p.value("t_publish", 0.0)},
         // The trainer group's rounds through the coordinator for the step that made it.
         {"coordinator_bytes", p.value("coordinator_bytes", uint64_t{0})},
         {"num_shards", p.value("num_shards", uint64_t{1})},
         // Each shard's bytes, as its member pushed it (a whole version: the version's bytes).
         {"shard_bytes", shard_bytes},
         {"shard_bytes_max", shard_max},
         {"checkpoint_shards", p.value("checkpoint_shards", uint64_t{1})},
         {"num_readers", delays.size()},
         {"bytes_from", {{"cache", from_v[0]}, {"peer", from_v[1]}, {"store", from_v[2]}}},
         {"t_redistribute_p50", delays.empty() ? none : json(percentile_of(delays, 50))},
         {"t_redistribute_max", delays.empty() ? none : json(percentile_of(delays, 100))}});
  }
  return {
      {"versions", versions},
      {"bytes_from", bytes_from},
      {"failovers", failovers},
      {"chunk_refetches", refetches},
      {"store_fallbacks", store_fallbacks},
      {"bytes_via_shm", via_shm},
      {"durable_writes", trainer_job["weights"].value("durable_writes", uint64_t{0})},
      {"durable_writes_failed", trainer_job["weights"].value("durable_writes_failed", uint64_t{0})},
      // Checkpoints (job/README.md, "Checkpoints"): the newest committed version and how
      // often the trainer waited at job.max_durability_lag.
      {"durable_version", trainer_job["weights"].value("durable_version", uint64_t{0})},
      {"durability_throttled", trainer_job["weights"].value("durability_throttled", uint64_t{0})}};
}

json with_time_to_productive(json record, int64_t spawned_unix_ms, const json& nodes) {
  const std::string name = record.value("replacement", std::string());
  const std::string role = record.value("role", std::string());
  const json* node = nullptr;
  for (const auto& n : nodes)
    if (n.value("name", "") == name && n.contains("stats") && n["stats"].contains("timeline"))
      node = &n;  // the last listed (a recreated StatefulSet pod shares its name)
  json phases{
      {"start", nullptr}, {"join", nullptr}, {"weights", nullptr}, {"first_commit", nullptr}};
  record["time_to_productive_s"] = nullptr;
  if (!node) {
    record["phases"] = phases;
    return record;
  }
  const json& st = (*node)["stats"];
  const json tl = st["timeline"];
  int64_t weights_ms = 0;
  if (const json* w = weights_of(*node)) weights_ms = w->value("first_weights_unix_ms", int64_t{0});
  if (role == "weights") {  // a cache is productive once it holds a version
    const json held = st.value("held_unix_ms", json::object());
    for (const auto& t : held)
      if (t.is_number() && (!weights_ms || t.get<int64_t>() < weights_ms))
        weights_ms = t.get<int64_t>();
  }
  // The phases in order; each is the time since the previous one that was reached.
  std::vector<std::pair<const char*, int64_t>> steps{
      {"start", tl.value("start_unix_ms", int64_t{0})},
      {"join", tl.value("join_unix_ms", int64_t{0})}};
  if (role == "rollout" || role == "weights") steps.push_back({"weights", weights_ms});
  if (role == "rollout")
    steps.push_back({"first_commit", tl.value("first_commit_unix_ms", int64_t{0})});
  int64_t prev = spawned_unix_ms;
  bool all = true;
  for (auto& [phase, t] : steps) {
    if (!t) {
      all = false;
      break;
    }
    phases[phase] = std::max(0.0, double(t - prev) * 1e-3);
    prev = std::max(prev, t);
  }
  record["phases"] = phases;
  if (all) record["time_to_productive_s"] = std::max(0.0, double(prev - spawned_unix_ms) * 1e-3);
  return record;
}

}  // namespace moerl::up
