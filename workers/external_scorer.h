// A reward served by a user's process (`reward.worker`, python/WORKERS.md): the reward node
// asks it to score each sample over the local worker protocol, bounded by
// `reward.worker_timeout_ms`. A score the worker cannot give (its function raised, it replied
// garbage, it hung or died) is an error for that one sample, with the reason and the
// worker's traceback in the message; the worker is restarted when it died or hung, and the
// node keeps serving. Used by one thread (the reward loop).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "workers/worker_link.h"

namespace moerl::workers {

struct external_scorer_options {
  std::string worker;                 // reward.worker
  std::string python;                 // worker.python: the interpreter for python: workers
  int64_t timeout_ms = 10000;         // reward.worker_timeout_ms: one score, answer included
  int64_t start_timeout_ms = 30000;   // worker.start_timeout_ms: spawn to "hello"
  int64_t restart_backoff_ms = 1000;  // worker.restart_backoff_ms: after a failed start/death
};

class external_scorer {
 public:
  static result<std::unique_ptr<external_scorer>> create(external_scorer_options opts);
  // The worker's reward for one response; `unit`/`seq` name the sample in errors and are
  // passed to the worker.
  // Starts the worker now (spawn, then its hello) rather than with the first sample: its
  // import (torch: ~1 s of a core) then overlaps the rollouts' first units instead of
  // following them. A failure is the first score's to report again, after the backoff.
  status start();
  result<float> score(const std::vector<uint32_t>& prompt, const std::vector<uint32_t>& tokens,
                      uint64_t unit, uint64_t seq);
  // {scored, raised, timed_out, refused_replies, worker_starts, worker_deaths}
  nlohmann::json stats() const;

 private:
  external_scorer(external_scorer_options opts, worker_spec spec);

  external_scorer_options opts_;
  worker_link link_;
  uint64_t next_id_ = 1;
  uint64_t scored_ = 0, raised_ = 0, timed_out_ = 0, refused_ = 0;
};

}  // namespace moerl::workers
