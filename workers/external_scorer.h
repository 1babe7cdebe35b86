// A reward served by a user's process (`reward.worker`, python/WORKERS.md): the reward node
// asks it to score each sample over the local worker protocol, bounded by
// `reward.worker_timeout_ms`. A score the worker cannot give (its function raised, it replied
// garbage, it hung or died) is an error for that one sample, with the reason and the
// worker's traceback in the message; the worker is restarted when it died or hung, and the
// node keeps serving. Used by one thread (the reward loop).
#pragma once

#include <cstdint>
#include <functional>
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
  // Several responses (a rollout's message: usually a whole group) in one round trip
  // (`score_batch`): one result per item, in order, each the reward or that item's error. The
  // call is bounded by timeout_ms per item; a worker that dies or hangs fails every item.
  struct score_item {
    const std::vector<uint32_t>* prompt;
    const std::vector<uint32_t>* tokens;
    uint64_t unit, seq;
  };
  std::vector<result<float>> score_many(const std::vector<score_item>& items);
  // {scored, raised, timed_out, refused_replies, worker_starts, worker_deaths}
  nlohmann::json stats() const;

 private:
  external_scorer(external_scorer_options opts, worker_spec spec);
  // Sends `msg` and returns the reply with its id (the request's `type` + "_result", or
  // score_error), refusing (and counting) any other reply on the way; timeout and death are
  // errors (the worker is dropped and restarted later). `what` names the request in errors.
  // `check_result` says what is wrong with a reply of the expected type ("" when nothing):
  // such a reply is refused as malformed and the wait goes on.
  // The wait is bounded by timeout_ms per item of the request.
  result<nlohmann::json> request(
      nlohmann::json msg, uint64_t id, size_t items, const std::string& what,
      const std::function<std::string(const nlohmann::json&)>& check_result);
  // A checked reply entry as a reward (counted as scored) or the user's exception (raised).
  result<float> outcome(const nlohmann::json& r, bool is_error, uint64_t unit, uint64_t seq);

  external_scorer_options opts_;
  worker_link link_;
  uint64_t next_id_ = 1;
  uint64_t scored_ = 0, raised_ = 0, timed_out_ = 0, refused_ = 0;
};

}  // namespace moerl::workers
