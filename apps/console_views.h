// `moerl console`'s human-readable views of the coordinator's replies: the nodes table and
// the status summary, shared by the one-shot verbs and `moerl console top`.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace moerl::apps {

// The `nodes` reply as a table, a header line first, one line per node.
std::string nodes_table(const nlohmann::json& nodes);
// The `status` reply: where the job is, its accounting with the invariant's verdict, and
// each buffer shard's fill.
std::string status_summary(const nlohmann::json& status);

}  // namespace moerl::apps
