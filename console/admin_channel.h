// How a console reaches the coordinator without knowing what carries the request: the node
// that hosts the console (actors/node_runtime.cpp) hands it a factory of callers, each of
// which sends one encoded messages::admin_request and returns the encoded admin_reply (or a
// reply naming the timeout when the coordinator does not answer within timeout_ms). The
// ZeroMQ console and the HTTP console both go through it, so they see the same replies, and
// console/ never depends on the actor system.
// Threading: a caller is used by the thread that made it (the CAF implementation holds a
// scoped actor); make one per serving thread or per request.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "messages/admin.h"

namespace moerl::console {

using admin_caller =
    std::function<std::string(const std::string& request, uint64_t request_id, int timeout_ms)>;
using admin_caller_factory = std::function<admin_caller()>;

// One request through `call`, decoded: a reply that does not decode becomes an error reply
// naming it.
messages::admin_reply ask_admin(const admin_caller& call, const messages::admin_request& request,
                                int timeout_ms);

}  // namespace moerl::console
