// `moerl console`'s side of the admin plane: one ZeroMQ REQ round trip carrying a
// messages::admin_request and returning the admin_reply, with a timeout (a dead or absent
// coordinator gives errc::timeout, not a hang). Not thread-safe; cheap to create per call.
#pragma once

#include <optional>
#include <string>

#include "common/error.h"
#include "messages/admin.h"
#include "zmq/plane_keys.h"

namespace moerl::console {

// Longest --deadline the console takes: a Spot notice gives two minutes, a drain a grace
// period; a day is already beyond any of them (the coordinator enforces the same bound).
constexpr double kMaxConsoleDeadlineS = 86400;

// A --deadline value: finite seconds in (0, kMaxConsoleDeadlineS]. errc::invalid_argument
// naming the value otherwise (negative, zero, NaN, infinite, absurd, not a number).
result<double> parse_console_deadline(const std::string& text);

// Most entries of each per-iteration list a `nodes --history N` reply keeps: more than any
// run has iterations; beyond it the option means "all", which is what leaving it out says.
constexpr size_t kMaxConsoleHistory = 100'000'000;

// A --history value (`nodes`: the newest N entries of each node's per-iteration stats lists,
// the rest left out): a decimal count in [0, kMaxConsoleHistory]. errc::invalid_argument
// naming the value otherwise.
result<size_t> parse_console_history(const std::string& text);

// Checks a request before it is sent (see console/CONSOLE.md, Console): a known command with the
// arguments it takes (status|nodes|report|shutdown none, inject KIND NODE, drain NODE),
// `deadline` only where a notice carries one and in range, `history` only for nodes, no other
// option. Errors:
// errc::unknown_command (the verb or inject kind), errc::invalid_argument (the rest).
status check_console_request(const messages::admin_request& req);

// Sends `req` (refused with check_console_request's error before connecting when it is not
// well formed) and waits up to timeout_ms for the reply; with `keys` (zmq::admin_plane_keys: a
// console off loopback) under CURVE.
result<messages::admin_reply> console_call(const std::string& address,
                                           const messages::admin_request& req, int timeout_ms,
                                           std::optional<zmq::plane_keys> keys = std::nullopt);

}  // namespace moerl::console
