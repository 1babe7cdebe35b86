// Every interruption source (EC2 IMDS spot notice, rebalance recommendation, SIGTERM, the
// console, a simulation) is reduced to one messages::interruption_notice before it reaches a
// node's supervisor, so the drain logic exists once (DESIGN.md §4).
#pragma once

#include <cstdint>
#include <string>

#include "common/error.h"
#include "messages/control.h"

namespace moerl::actors {

// Wall-clock now in milliseconds since the Unix epoch. Deadlines cross processes and come
// from IMDS as wall-clock times, so they are wall-clock, not steady.
int64_t unix_now_ms();

messages::interruption_notice make_notice(const std::string& node,
                                          messages::interruption_source source,
                                          int64_t deadline_unix_ms, std::string reason);

// A rebalance recommendation carries no deadline (EC2 only says the instance is at elevated
// risk of interruption), so the node assumes `grace_ms` from now. IMDS and
// `moerl console inject rebalance` both build it here, so a node cannot tell them apart
// except by `reason`: one mechanism, one drain.
messages::interruption_notice rebalance_notice(const std::string& node, int64_t grace_ms,
                                               std::string reason);

// The notice a console command sends to a node: `inject spot` (a simulated Spot notice),
// `inject rebalance` (a simulated rebalance recommendation) or `drain`, with its deadline
// already chosen. errc::unknown_command for anything else (kill and sigterm are signals,
// not notices).
result<messages::interruption_notice> console_notice(const std::string& what,
                                                     const std::string& node,
                                                     int64_t deadline_unix_ms);

}  // namespace moerl::actors
