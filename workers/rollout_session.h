// The node side of an external rollout worker (`rollout.worker`, python/WORKERS.md): the
// rollout worker actor keeps leasing, fencing, delivery and reports exactly as for native
// work; this session offers each lease to the user's process and checks every sample it
// submits before the actor delivers it. A sample is refused, by name and counted, when it
// carries a fencing token other than the lease's (stale_fencing_token), names a unit this
// worker holds no lease on (unknown_unit), repeats a (group, index) (duplicate), or is
// malformed (a group not in the lease, an index >= group size, token ids outside the job's
// vocabulary, more tokens than the job trains on, logprobs not one finite float per token).
// Nothing refused reaches the sample plane. Used by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "workers/worker_link.h"
#include "workers/worker_protocol.h"

namespace moerl::workers {

struct rollout_session_options {
  std::string worker;  // rollout.worker
  std::string python;  // worker.python
  int64_t start_timeout_ms = 30000;
  int64_t restart_backoff_ms = 1000;
  uint32_t vocab_size = 0;             // token ids must be below it (0: not checked)
  uint32_t max_completion_tokens = 0;  // at most this many generated tokens (0: not checked)
  // At most this many responses in one `samples` message (the sample plane's message limit,
  // ledger::kMaxSamplesPerMessage, set by the rollout role).
  uint32_t max_samples_per_message = 256;
  // The worker's `weights` request (RolloutWorker.weights(v)): version v's bytes as a file the
  // worker maps, {path, bytes, sha256}; `refetch`: the worker found the last file's bytes did
  // not match its sha256, so fetch the version again. Null: the node offers no weights.
  std::function<result<nlohmann::json>(uint64_t version, bool refetch)> weights;
  // In a rollout group of worker processes (rollout.group_size > 1, python/WORKERS.md
  // "Rollout groups"): the welcome's "group", this worker's place {rank, world_size, addr,
  // port, incarnation} (workers/worker_group.h); null: a worker of its own. Rank 0's session is
  // offered the group's leases; a rank > 0's only serves (serve_member): its worker's weights
  // of any version (the lease it generates for came from rank 0 over the process group), and
  // its submissions are refused (not_rank_zero).
  nlohmann::json group;
};

// One leased unit as offered to the worker.
struct lease_offer {
  uint64_t unit = 0;
  uint32_t attempt = 0;  // the fencing token
  uint64_t policy_version = 0;
  uint32_t group_size = 0;
  uint64_t deadline_unix_ms = 0;
  std::vector<std::pair<uint64_t, std::vector<uint32_t>>> groups;  // (group id, prompt)
  nlohmann::json sampling;  // the job's sampling settings, passed through
};

// A sample the session accepted: group_index is its group's position in the offer.
struct accepted_sample {
  uint32_t group_index = 0;
  uint32_t index_in_group = 0;
  std::vector<uint32_t> tokens;
  std::vector<float> logprobs;
};

enum class rollout_event_kind {
  none,       // nothing arrived in time
  samples,    // accepted samples (one `sample` message, or a `samples` batch): deliver, ack()
  done,       // the worker says it submitted the whole lease
  give_back,  // the worker cannot finish the lease (its own decision)
};
struct rollout_event {
  rollout_event_kind kind = rollout_event_kind::none;
  std::vector<accepted_sample> samples;  // in the order the worker sent them
  bool batch = false;                    // they came as one `samples` message
  std::string reason;                    // give_back's
};

class rollout_session {
 public:
  static result<std::unique_ptr<rollout_session>> create(rollout_session_options opts);
  // Starts the worker if it is not running (waiting for its hello: a second or more for a
  // Python worker importing its framework). offer() does it too; calling it first lets the
  // caller pick the lease's policy version once the worker can take it.
  status start();
  // Starts the worker if it is not running, writes the lease's version file (see the .cpp)
  // and sends it the lease. The lease is current until close(); samples for any other are
  // refused.
  status offer(const lease_offer& l);
  // The next event of the current lease, waiting at most wait_ms. Refused messages are
  // answered with an "error" frame and counted, never returned. peer_dead when the worker
  // died or broke the framing (it is killed; the next offer starts a new one).
  result<rollout_event> next(int64_t wait_ms);
  // The event's samples were delivered (to a reward node or their shard): tell the worker
  // (`sample_ack` for one `sample`, `samples_ack` for a batch).
  status ack(const rollout_event& ev);
  // A Spot notice or drain: the node stops by deadline_unix_ms (the worker's SDK raises its
  // flag and calls its callback). Sent once per worker process; later calls do nothing.
  status notice(int64_t deadline_unix_ms, const std::string& reason);
  // The lease ended (status "finished", "returned" or "failed", as reported to the
  // coordinator); its unit stays known so late samples are refused as stale.
  status close(const std::string& status, const std::string& reason);
  // Stops the worker (the actor leaves): its channel closed, so its leases() loop ends and
  // the process exits by itself (it has seen every notice sent before); killed after
  // grace_ms if it does not.
  void stop(int64_t grace_ms);
  // {samples_accepted, refused: {reason: n}, worker_starts, worker_deaths, leases_offered}
  nlohmann::json stats() const;
  bool running() const { return link_.running(); }
  // Worker processes started so far (a group's worker is never restarted inside an
  // incarnation: once one ran and is gone, the group re-forms).
  uint64_t starts() const { return link_.starts(); }
  // A rollout group's rank > 0 (options.group): starts the worker and answers its weights
  // requests until stop() says so (ok) or the worker dies (peer_dead, naming how).
  status serve_member(const std::function<bool()>& stop);

 private:
  rollout_session(rollout_session_options o, worker_spec s);
  // Stops the worker after `why` (see worker_link::drop); the lease in hand fails with it.
  status lost(const std::string& why);
  void refuse(refusal why, const std::string& detail);
  struct bad_sample;
  // The message's unit and fencing token against the lease in hand.
  std::optional<bad_sample> check_fencing(const nlohmann::json& msg, const char* what);
  // One response (group_id, index, tokens, logprobs) against the lease; `also_taken`: slots
  // taken earlier in the same message.
  std::optional<bad_sample> check_response(
      const nlohmann::json& item, const std::set<std::pair<uint32_t, uint32_t>>& also_taken,
      accepted_sample& out);
  // A `sample` message, or a `samples` batch (admitted whole or refused whole), against the
  // lease; refuses (once, naming the first problem) and returns false if bad.
  bool check_submission(const nlohmann::json& msg, bool batch, std::vector<accepted_sample>& out);
  // Answers a `weights` request (weights_ready / weights_error); an error when the worker died.
  status answer_weights(const nlohmann::json& msg);

  rollout_session_options opts_;
  worker_link link_;
  bool has_lease_ = false;
  uint64_t noticed_at_start_ = 0;  // link_.starts() of the process sent the notice (0: none)
  lease_offer lease_;
  std::set<std::pair<uint32_t, uint32_t>> submitted_;  // (group index, index) of this lease
  std::map<uint64_t, uint32_t> past_attempts_;         // unit -> last attempt closed here
  uint64_t accepted_ = 0, offered_ = 0;
  uint64_t weights_served_ = 0, weights_refetched_ = 0;
  uint32_t rank_ = 0;  // the worker's rank in its rollout group (0: leases; > 0: serve_member)
  std::map<std::string, uint64_t> refused_;
};

}  // namespace moerl::workers
