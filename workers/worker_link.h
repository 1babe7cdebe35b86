// A role's worker process as its node keeps it (python/WORKERS.md): started on demand
// (spawned, or a user's process attaching), greeted (its "hello" checked, a "welcome" with
// the role's facts sent back), and after it died, hung or misbehaved, stopped and started
// again no sooner than the restart backoff. The reward scorer, the rollout session and the
// environment host each keep one; used by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "workers/worker_process.h"

namespace moerl::workers {

struct worker_link_options {
  std::string role;                   // "reward", "rollout", "env": the hello must name it
  int64_t start_timeout_ms = 30000;   // worker.start_timeout_ms: spawn to hello
  int64_t restart_backoff_ms = 1000;  // worker.restart_backoff_ms
  nlohmann::json welcome;             // extra fields of the welcome (the role's limits)
};

class worker_link {
 public:
  worker_link(worker_spec spec, worker_link_options opts)
      : spec_(std::move(spec)), opts_(std::move(opts)) {}
  // A greeted worker (starting one if none runs); peer_dead naming why when there is none:
  // still in its backoff, failed to start, or its hello was refused.
  status ensure_started();
  bool running() const { return proc_ != nullptr; }
  frame_channel& channel() { return proc_->channel(); }
  // Stops the worker after `why` (logged with how it ended); the next start waits the backoff.
  void drop(const std::string& why);
  // The node lets go of its worker (closes the channel; kills it after grace_ms).
  void stop(int64_t grace_ms);
  // The welcome's extra fields for the next worker started (the trainer's resume point).
  void set_welcome(nlohmann::json welcome) { opts_.welcome = std::move(welcome); }
  // Why the last worker ended, for errors.
  const std::string& last_death() const { return last_death_; }
  const worker_spec& spec() const { return spec_; }
  uint64_t starts() const { return starts_; }
  uint64_t deaths() const { return deaths_; }

 private:
  worker_spec spec_;
  worker_link_options opts_;
  std::unique_ptr<worker_process> proc_;
  int64_t next_start_ms_ = 0;
  std::string last_death_;
  uint64_t starts_ = 0, deaths_ = 0;
};

}  // namespace moerl::workers
