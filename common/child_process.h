// Starting, signalling and reaping child processes: the one fork/exec/kill/waitpid helper of
// the tree, used by up/local_cluster.cpp (the nodes of a local job) and sims/ (replacement
// nodes, nodes inside a network namespace, the `ip` tool). Plain POSIX, every call checked
// with POSIX_CHECK (common/posix_check.h).
// Thread-safety: every function is safe from any thread.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace moerl {

// How to start a process: its argv (argv[0] looked up in PATH unless it holds a '/'), its
// working directory ("" keeps this process's) and its environment ("KEY=value"; empty
// inherits this process's).
struct process_spec {
  std::vector<std::string> argv;
  std::string cwd;
  std::vector<std::string> env;
  // The kernel SIGKILLs the child when the thread that spawned it ends (PR_SET_PDEATHSIG),
  // so a parent that is killed or crashes leaves no orphans behind. Spawn from a thread that
  // lives as long as the child should (a local cluster's supervision loop on the main thread).
  bool die_with_parent = false;
};

// Whether the child leads a process group of its own. `own`: signals sent to this process's
// group (a terminal's Ctrl-C) do not reach it, so whoever started it must end it. `inherit`:
// it shares this process's group, so a Ctrl-C ends it together with its parent.
enum class process_group { own, inherit };

// Starts `spec` with `prefix` before its argv (e.g. {"ip", "netns", "exec", "ns"}), stdin
// from /dev/null, stdout and stderr appended to `log_path` (/dev/null when empty) and no
// signal blocked. When exec fails, the child writes why to the log and exits 127 (126 when
// the working directory is unusable). Reap the child with poll_exit() or wait_exit().
result<pid_t> spawn_process(const process_spec& spec, const std::vector<std::string>& prefix,
                            const std::string& log_path, process_group group = process_group::own);

// kill(pid, sig); errc::not_found when the process no longer exists, errc::invalid_argument
// for pid <= 1 (which would signal a group or init).
status send_signal(pid_t pid, int sig);

// Reaps `pid` (a child of this process) if it has exited, without blocking: its raw wait
// status, or nullopt while it runs. An error when it is not (or no longer) our child.
// A child killed by a signal could not close its libfabric endpoints: the reap also removes
// its /dev/shm regions (common/shm_leftovers.h), since only its parent knows the pid is dead.
// Every reaper in moerl (moerl up, the sims, benches, fabric's rank launcher) goes through here.
result<std::optional<int>> poll_exit(pid_t pid);

// Waits up to timeout_ms for `pid` (a child) to exit; its raw wait status, or errc::timeout.
result<int> wait_exit(pid_t pid, int timeout_ms);

// A raw wait status (poll_exit, wait_exit, waitpid) in words: "exit code 2",
// "killed by SIGKILL", "killed by SIGSEGV (core dumped)". The one place a wait status
// becomes text, so every message about a process's end reads the same.
std::string describe_wait_status(int wait_status);

}  // namespace moerl
