// Every interruption source (EC2 IMDS spot notice, rebalance recommendation, SIGTERM, the
// console, a simulation) is reduced to one messages::interruption_notice before it reaches a
// node's supervisor, so the drain logic exists once (DESIGN.md §4).
#pragma once

#include <cstdint>
#include <string>

#include "messages/control.h"

namespace moerl::actors {

// Wall-clock now in milliseconds since the Unix epoch. Deadlines cross processes and come
// from IMDS as wall-clock times, so they are wall-clock, not steady.
int64_t unix_now_ms();

messages::interruption_notice make_notice(const std::string& node,
                                          messages::interruption_source source,
                                          int64_t deadline_unix_ms, std::string reason);

}  // namespace moerl::actors
