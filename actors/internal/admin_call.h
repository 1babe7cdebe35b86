// The console's admin channel (console/admin_channel.h) over CAF: each caller holds a scoped
// actor of `sys` and sends the request bytes to the coordinator actor as an admin message.
// actors/node_runtime.cpp hands this to the ZeroMQ and HTTP consoles it starts.
#pragma once

#ifndef MOERL_INSIDE_moerl_actors
#error \
    "actors/internal/admin_call.h is private to moerl_actors (actors/): include its public headers"
#endif

#include <caf/fwd.hpp>

#include "console/admin_channel.h"

namespace moerl::actors {

console::admin_caller_factory coordinator_admin_channel(caf::actor_system& sys,
                                                        caf::actor coordinator);

}  // namespace moerl::actors
