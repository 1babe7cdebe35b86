// One log format for every process: time, level, node id, role and component.
// Level comes from config (log.level) or MOERL_LOG_LEVEL, which wins.
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace moerl {

// Call once per process, before any component logs. Safe to call again (e.g. after the
// node learns its id); later calls re-format every registered logger.
void init_logging(const std::string& node_id, const std::string& role, const std::string& level);

// A logger named after its component ("ledger", "fabric", ...). Safe from any thread.
std::shared_ptr<spdlog::logger> logger(const std::string& component);

}  // namespace moerl
