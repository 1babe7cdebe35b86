// `moerl console`'s side of the admin plane: one ZeroMQ REQ round trip carrying a
// messages::admin_request and returning the admin_reply, with a timeout (a dead or absent
// coordinator gives errc::timeout, not a hang). Not thread-safe; cheap to create per call.
#pragma once

#include <string>

#include "common/error.h"
#include "messages/admin.h"

namespace moerl::actors {

result<messages::admin_reply> console_call(const std::string& address,
                                           const messages::admin_request& req, int timeout_ms);

}  // namespace moerl::actors
