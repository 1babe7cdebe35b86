// A user's worker process, started and owned by the node that serves it (python/WORKERS.md).
// The node holds one end of a socketpair; the child finds the other as fd 3
// (MOERL_WORKER_FD=3) and speaks the local worker protocol on it (workers/PROTOCOL.md). The
// child dies with the thread that started it (PR_SET_PDEATHSIG) and with this object, so a
// worker never outlives the node whose lease it works under.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "workers/frame_channel.h"

namespace moerl::workers {

// What to run for a role's worker, parsed from its config value (`reward.worker`,
// `rollout.worker`):
//   python:PKG.MODULE:FUNCTION  -> PYTHON -m moerl.worker ROLE PKG.MODULE:FUNCTION
//   exec:COMMAND LINE           -> /bin/sh -c 'COMMAND LINE' (a program using moerl.worker)
//   attach:/ABSOLUTE/PATH       -> nothing started: the node listens on that unix socket and
//                                  serves the worker the user started with
//                                  MOERL_WORKER_SOCKET=PATH (one connection per worker)
struct worker_spec {
  std::string text;               // the config value, for logs
  std::vector<std::string> argv;  // argv[0] is a path or found on PATH (empty for attach:)
  std::string attach_path;        // attach:'s socket path (empty otherwise)
};
result<worker_spec> parse_worker_spec(const std::string& text, const std::string& role,
                                      const std::string& python);

class worker_process {
 public:
  // Starts the worker. Its environment is the node's plus MOERL_WORKER_FD, MOERL_WORKER_ROLE
  // and, when this binary sits in a build tree with the moerl package (build/python), that
  // directory first on PYTHONPATH, so `python:` workers import the package of this build.
  static result<std::unique_ptr<worker_process>> spawn(const worker_spec& spec,
                                                       const std::string& role);
  // Waits up to timeout_ms for a worker the user started to connect to spec.attach_path
  // (bound and listened on at the first call for that path, shared by the node's actors; a
  // stale socket file there is replaced). An attached worker is never signalled: kill() and
  // stop() only close its connection, and it may connect again.
  static result<std::unique_ptr<worker_process>> attach(const worker_spec& spec,
                                                        int64_t timeout_ms);
  // spawn() or attach(), as the spec says.
  static result<std::unique_ptr<worker_process>> start(const worker_spec& spec,
                                                       const std::string& role,
                                                       int64_t attach_timeout_ms);
  ~worker_process();  // SIGKILLs and reaps a worker still running (spawned ones)
  worker_process(const worker_process&) = delete;
  worker_process& operator=(const worker_process&) = delete;

  frame_channel& channel() { return *channel_; }
  pid_t pid() const { return pid_; }  // an attached worker's: from SO_PEERCRED
  // SIGKILL (a hung worker cannot be interrupted politely mid-call) and reap.
  void kill();
  // Closes the channel (the SDK returns from its loop and the process exits on its own) and
  // waits up to grace_ms for that; then kill().
  void stop(int64_t grace_ms);
  // How the worker ended ("exit status 1", "signal 9"), once it has; nullopt while it runs.
  std::optional<std::string> poll_exit();

 private:
  worker_process(pid_t pid, int fd, bool attached = false);
  pid_t pid_ = -1;
  bool attached_ = false;  // connected by the user's process, not started here
  std::optional<std::string> exit_;
  std::unique_ptr<frame_channel> channel_;
};

}  // namespace moerl::workers
