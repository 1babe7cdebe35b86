// The runner's hands on node processes beyond common/child_process.h (spawn, signal, wait):
// liveness and the command line a node was started with (so a replacement or a restarted
// coordinator is started exactly the same way, whoever launched the original), read from
// /proc, and running a tool to completion. Linux only (/proc).
// Thread-safety: every function is safe from any thread.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/child_process.h"
#include "common/error.h"

namespace moerl::sims {

// True while the process exists and is not a zombie.
bool process_alive(pid_t pid);

// 'R', 'S', 'T' (stopped), 'Z', ... from /proc/PID/stat; 0 if unreadable.
char process_state(pid_t pid);

// How a process was started: argv from /proc/PID/cmdline, the working directory and the
// environment, read while it is alive; spawn_process() starts another one like it.
using launch_spec = process_spec;
result<launch_spec> read_launch_spec(pid_t pid);

// Runs a tool to completion (argv[0] looked up in PATH) with a timeout; a non-zero exit is
// errc::io_error carrying the tool's output.
status run_tool(const std::vector<std::string>& argv, int timeout_ms = 10000);

}  // namespace moerl::sims
