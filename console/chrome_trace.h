// The policy iterations as Chrome trace-event JSON (the format chrome://tracing and Perfetto
// open): {"traceEvents": [...]} with complete events (ph "X", ts/dur in microseconds), one
// lane (tid) per node, and instant events (ph "i") for the interruptions. Served at
// /api/v1/trace; `moerl up --trace FILE` writes the same at the end of a run.
//
// What the runtime measures today: the trainer's own phases (buffer wait, train, weights
// publish, checkpoint), with the wall clock of each step's end; generation and reward time
// summed over the iteration's samples. The rollout and reward lanes show that sum divided
// evenly among the role's nodes (args.attributed says so); weight redistribution to the
// rollout nodes and env time are not measured yet and have no events.
#pragma once

#include <nlohmann/json.hpp>

namespace moerl::console {

// `snapshot`: the coordinator's `snapshot` view.
nlohmann::json chrome_trace(const nlohmann::json& snapshot);

}  // namespace moerl::console
