#pragma once
// Issue 31 (liveness at load): a node's heartbeat-critical threads run above the CPU's bulk
// work. At nice 0 they were one task among the machine's busy ones: beside 60 busy nice-0
// processes in their session (CI's compile jobs, tests/apps/cpu_hog.py) each got ~1/30 of a
// core, the coordinator process did not run for 3-4 s at a time, CAF's 3 s link timeout fired
// on both sides and nodes were declared dead while alive.

#include <caf/fwd.hpp>

namespace moerl::actors {

// Sets the calling thread's nice value to `nice` (node.control_nice; 0 leaves it). Threads it
// creates afterwards inherit it. Raising a priority needs CAP_SYS_NICE (root has it; most pods
// do not, unless their securityContext adds SYS_NICE): without it the node logs once, at info,
// and runs as before. Returns whether the value took.
bool prioritize_this_thread(int nice);

// The same for `sys`'s middleman I/O thread (the link heartbeats, middleman.heartbeat-interval,
// are sent and checked there; it runs the change itself, posted to it) and CAF's timer thread
// (found by name, "caf.clock": every delayed message, the agent's heartbeat tick included,
// comes from it). Not by the name "caf.multiplexer": CAF 0.17 gives its scheduler workers,
// which run the role actors' bulk work, that name too.
void prioritize_caf_io_threads(caf::actor_system& sys, int nice);

}  // namespace moerl::actors
