// The node side of an external trainer (`trainer.worker`, python/WORKERS.md): the trainer
// node's driver keeps pulling batches from the shards, claiming their groups from the ledger
// and confirming them once a policy version has them, exactly as for the native step
// (ledger/LEDGER.md, "Handed to a trainer"); this object hands each batch's groups to the
// user's process and serves what it asks for while it holds them: `publish` (its weights
// become the next policy version) and `checkpoint` (a durable checkpoint in the store). The
// tensors travel as files the worker writes under a prefix the node names (/dev/shm on
// Linux): only their path and size cross the JSON channel. Used by one thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "workers/worker_link.h"
#include "workers/worker_protocol.h"

namespace moerl::workers {

struct external_trainer_options {
  std::string worker;  // trainer.worker
  std::string python;  // worker.python
  int64_t start_timeout_ms = 30000;
  int64_t restart_backoff_ms = 1000;
  // trainer.worker_timeout_ms: the longest the worker may be silent while it holds a batch
  // (its training step) or before its first `next`; past it the worker is killed.
  int64_t step_timeout_ms = 600000;
  // Where the worker writes its tensor files: every path it names must begin with this
  // (e.g. "/dev/shm/1234:trainer:"); anything else is refused as malformed.
  std::string file_prefix;
  // A trainer group's member (trainer.group_size > 1): the group's abort flag (raised once the
  // group broke; every wait for the worker ends at once with peer_dead) and this worker's
  // place, for the messages that name it. Null / 0 of 1: a single-process trainer.
  std::shared_ptr<const std::atomic<bool>> group_abort;
  uint32_t rank = 0, world_size = 1;
};

// What the node does with the worker's requests. Each gets the file's bytes (read and
// removed by the session) and the request's JSON; its answer's fields go back to the worker
// (an error goes back as `request_failed` with its message; the worker goes on).
struct external_trainer_handlers {
  std::function<result<nlohmann::json>(std::string bytes, const nlohmann::json& request)> publish;
  std::function<result<nlohmann::json>(std::string bytes, const nlohmann::json& request)>
      checkpoint;
  // The welcome of a newly started worker (its policy version, the checkpoint to resume
  // from): asked each time a worker is started.
  std::function<nlohmann::json()> welcome;
};

class external_trainer {
 public:
  static result<std::unique_ptr<external_trainer>> create(external_trainer_options opts,
                                                          external_trainer_handlers handlers);
  ~external_trainer();
  // Hands `groups` (a JSON list; empty with flush: no batch came for a while, train on what
  // you hold) to the worker, starting one first if none runs, and returns once the worker
  // asks for the next batch: the number of groups it wants next (0: any). Its requests on
  // the way go to the handlers. peer_dead / timeout: the worker died, broke the protocol's
  // framing or stayed silent past step_timeout_ms (it is killed; the next call starts another).
  result<uint64_t> hand(const nlohmann::json& groups, bool flush);
  // Starts a worker if none runs and waits for its first `next` (it loaded its checkpoint):
  // the step's owner calls it at once, so the worker's import overlaps the first rollouts
  // instead of following the first batch. hand() starts one itself when none runs.
  status start();
  // A trainer group member k > 0 (python/WORKERS.md, "Trainer groups"): starts the worker and
  // serves its `checkpoint` requests (its own shard) until `stop()` says the group's leader
  // stopped it (ok; the worker is stopped), the group broke (peer_dead) or the worker died or
  // broke the framing (peer_dead). Its batches come from rank 0 over the process group, so
  // `next` and `publish` are refused by name. No restart: a member's worker that dies breaks
  // the group, which re-forms (every member starts a new worker).
  status serve_member(const std::function<bool()>& stop);
  // Worker processes started so far.
  uint64_t starts() const;
  // True while a worker runs (a restarted driver must drop the groups a live one holds).
  bool running() const { return link_.running(); }
  // Stops the worker (closes its channel; killed after grace_ms).
  void stop(int64_t grace_ms);
  // {batches, publishes, checkpoints, refused_requests, failed_requests, worker_starts,
  // worker_deaths}
  nlohmann::json stats() const;

 private:
  external_trainer(external_trainer_options opts, external_trainer_handlers handlers,
                   worker_spec spec);
  // Reads frames until the worker's `next`, serving publish/checkpoint on the way.
  result<uint64_t> until_next();
  // One frame within timeout_ms (polled in slices, so a raised group abort ends it at once):
  // the message, nullopt on timeout, or peer_dead (the worker is dropped).
  result<std::optional<nlohmann::json>> receive(int64_t timeout_ms);
  // Refuses a message by name (counted, logged, answered with an error frame).
  void refuse(const checked& c);
  // Starts a worker (its welcome asked anew) if none runs; does not wait for it.
  status start_worker();
  // Serves one publish/checkpoint request (the envelope checked already), replying to it.
  status serve_request(const nlohmann::json& msg, const std::string& type);
  // The bytes of the file a request names (checked against the prefix and its size; the
  // file is removed), or why not.
  result<std::string> take_file(const nlohmann::json& msg);

  external_trainer_options opts_;
  external_trainer_handlers handlers_;
  worker_link link_;
  bool ready_ = false;  // the worker asked for a batch and has not got it yet
  uint64_t wanted_ = 0;
  uint64_t batches_ = 0, publishes_ = 0, checkpoints_ = 0, refused_ = 0, failed_ = 0;
};

}  // namespace moerl::workers
