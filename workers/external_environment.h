// Environments served by a user's process (`env.worker`, python/WORKERS.md): each env actor
// of an env node has one env_host (the process and its channel), and every episode that actor
// runs is an external_environment, a session inside that process. A step the process cannot
// answer (its class raised, it replied garbage, hung past env.worker_timeout_ms or died) is
// an error for that step, with the reason and the traceback in the message; the node keeps
// serving. A process that died or was killed takes its sessions with it: their next step
// says so (as a restarted native environment actor's do). Used by the env actor's thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "env/env_api.h"
#include "workers/worker_link.h"

namespace moerl::workers {

struct env_host_options {
  std::string worker;         // env.worker
  std::string python;         // worker.python
  int64_t timeout_ms = 5000;  // env.worker_timeout_ms: one reset or step, answer included
  int64_t start_timeout_ms = 30000;
  int64_t restart_backoff_ms = 1000;
};

class env_host {
 public:
  static result<std::shared_ptr<env_host>> create(env_host_options opts);
  // One request {type, id, session, ...fields} and its observation.
  result<env::env_observation> call(const char* type, uint64_t session, nlohmann::json fields);
  // Fire and forget: the process drops the session.
  void close(uint64_t session);
  // +1 per process started: sessions opened under an older one are gone.
  uint64_t incarnation() const { return link_.starts(); }
  // {requests, raised, timed_out, refused_replies, worker_starts, worker_deaths}
  nlohmann::json stats() const;

 private:
  env_host(env_host_options o, worker_spec s);

  env_host_options opts_;
  worker_link link_;
  uint64_t next_id_ = 1;
  uint64_t requests_ = 0, raised_ = 0, timed_out_ = 0, refused_ = 0;
};

// One episode of `task` in the host's process (session ids are the env node's).
std::unique_ptr<env::environment> make_external_environment(std::shared_ptr<env_host> host,
                                                            uint64_t session, std::string task);

}  // namespace moerl::workers
