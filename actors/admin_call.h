// One admin request to the coordinator actor from a console thread outside CAF (the ZeroMQ
// console, the HTTP console): the coordinator's admin_reply, or one naming the timeout when it
// does not answer within timeout_ms. Both consoles go through here, so they see the same
// replies.
#pragma once

#include <cstdint>
#include <string>

#include <caf/fwd.hpp>

#include "messages/admin.h"

namespace moerl::actors {

// `request` is admin_request bytes (already decoded once by the caller to get request_id);
// returns admin_reply bytes.
std::string ask_coordinator(caf::scoped_actor& self, const caf::actor& coordinator,
                            const std::string& request, uint64_t request_id, int timeout_ms);

messages::admin_reply ask_coordinator(caf::scoped_actor& self, const caf::actor& coordinator,
                                      const messages::admin_request& request, int timeout_ms);

}  // namespace moerl::actors
