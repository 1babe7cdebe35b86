// The runner's hands on node processes: signals, liveness, the command line a node was
// started with (so a replacement or a restarted coordinator is started exactly the same
// way, whoever launched the original), and spawning. Linux only (/proc).
// Thread-safety: every function is safe from any thread.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/error.h"

namespace moerl::sims {

// kill(pid, sig); errc::not_found when the process no longer exists.
status send_signal(pid_t pid, int sig);

// True while the process exists and is not a zombie.
bool process_alive(pid_t pid);

// 'R', 'S', 'T' (stopped), 'Z', ... from /proc/PID/stat; 0 if unreadable.
char process_state(pid_t pid);

// How a process was started: argv from /proc/PID/cmdline, the working directory and the
// environment, read while it is alive.
struct launch_spec {
  std::vector<std::string> argv;
  std::string cwd;
  std::vector<std::string> env;  // "KEY=value"
};
result<launch_spec> read_launch_spec(pid_t pid);

// Starts `spec` (with `prefix` before argv, e.g. {"ip", "netns", "exec", "ns"}) in a new
// process group, stdout and stderr appended to `log_path` (or /dev/null when empty).
// The child is reaped by reap_if_exited() or wait_exit().
result<pid_t> spawn_process(const launch_spec& spec, const std::vector<std::string>& prefix,
                            const std::string& log_path);

// Reaps `pid` (a child of this process) if it has exited, without blocking, so killed nodes
// do not linger as zombies. True when it was reaped (or is not our child any more).
bool reap_if_exited(pid_t pid);

// Runs a tool to completion (argv[0] looked up in PATH) with a timeout; a non-zero exit is
// errc::io_error carrying the tool's output.
status run_tool(const std::vector<std::string>& argv, int timeout_ms = 10000);

// Waits up to timeout_ms for `pid` (a child) to exit; returns its raw wait status, or
// errc::timeout.
result<int> wait_exit(pid_t pid, int timeout_ms);

}  // namespace moerl::sims
