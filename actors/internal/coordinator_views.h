// The coordinator's views beyond status/nodes/report, built from coordinator_core's state in
// the coordinator actor (so every reader sees one consistent moment): the admin verbs
// `iterations`, `interruptions`, `ledger` and `snapshot` (all of them in one reply). The ZeroMQ
// console (`moerl console VERB`) and the HTTP console (/api/v1/VERB) both ask the coordinator
// for these verbs, so the two always agree.
#pragma once

#ifndef MOERL_INSIDE_moerl_actors
#error \
    "actors/internal/coordinator_views.h is private to moerl_actors (actors/): include its public headers"
#endif

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace moerl::actors {

class coordinator_core;

// The view named `verb`, or nullopt when `verb` is not one of these (the caller's other verbs).
std::optional<nlohmann::json> snapshot_view(const coordinator_core& core, const std::string& verb);

// iterations: the job's figures (task, reward_random, reward_max), one entry per recent policy
// iteration (reward, samples, staleness, phase times, end time) merged from the trainer's
// reward curve and timings, and the trainer's samples/s over its last iterations.
nlohmann::json iterations_json(const coordinator_core& core);
// ledger: units by state (pending, leased, committed) and by attempts made.
nlohmann::json ledger_json(const coordinator_core& core);

// Most iterations a view carries (the page draws these; the trainer's report keeps them all).
constexpr size_t kMaxViewIterations = 200;

}  // namespace moerl::actors
