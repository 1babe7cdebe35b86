// A trainer member's checkpoints, written off the step loop (job/README.md, "Checkpoints"):
// member k writes shard k of every policy version (its ranks' parameters and Adam moments)
// on its own background thread (store/checkpoint.h's sharded layout), and member 0 (shard 0)
// then commits the version once every shard's marker is there. A single-process trainer is a
// group of one: one shard, the same path. The step loop never waits on the store, except that
// member 0 throttles when job.max_durability_lag versions are announced but not committed.
// Thread-safe: submit, throttle and durable from the trainer's thread; the writes run on one
// background thread, in order.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "job/durable_writer.h"
#include "store/checkpoint.h"
#include "store/object_store.h"

namespace moerl::job {

// Whether the store takes this member's checkpoint writes: the newest failure ("" once a
// write went through again) and how many tries failed. Shared by the writer thread and the
// trainer's thread.
class store_outage {
 public:
  // What a store that does not answer returns (io_error, timeout): worth another try.
  // Anything else (a bad part list, a marker of another shape) and a full store (ENOSPC:
  // it does not empty itself) fail at once.
  static bool is_outage(const error& e);
  void failed(std::string what);  // logs the first failure of an outage
  void answered();                // logs the end of an outage
  std::string failing() const;
  uint64_t failures() const;

 private:
  mutable std::mutex mu_;
  std::string last_error_;
  uint64_t failures_ = 0;
};

// An object a checkpoint's meta names (the reward curve's segments, job/checkpointed_curve.h):
// put, synced, before the commit.
struct named_object {
  std::string key;
  std::string bytes;
};

// job.checkpoint_interval as configured (0: half of job.max_durability_lag, at least 1).
inline uint64_t checkpoint_interval(int64_t configured, int64_t max_lag) {
  if (configured > 0) return static_cast<uint64_t>(configured);
  return static_cast<uint64_t>(std::max<int64_t>(1, max_lag / 2));
}
// Whether policy version v is checkpointed (every interval-th). Member 0 and the other
// members decide alike, so every shard of a due version is written.
inline bool checkpoint_due(uint64_t version, uint64_t interval) {
  return interval <= 1 || version % interval == 0;
}

class shard_checkpointer {
 public:
  // ckpt_prefix: the run's checkpoint prefix (job::checkpoint_prefix). keep_every:
  // job.checkpoint_every (member 0 removes the previous committed version unless it is a
  // multiple). max_lag: job.max_durability_lag. group_abort: the trainer group's abort flag
  // (actors/job.h trainer_group::abort_flag; null: never raised): once a member is lost, a
  // commit waiting for its shard and a throttled step give up at once.
  shard_checkpointer(std::shared_ptr<store::object_store> store, std::string ckpt_prefix,
                     uint32_t shard, uint32_t num_shards, uint64_t max_lag, uint64_t keep_every,
                     std::shared_ptr<const std::atomic<bool>> group_abort = nullptr,
                     std::chrono::milliseconds patience = kStorePatience);
  // How long one write keeps trying a store that refuses it, and member 0's commit waits for
  // the other members' shards, before it gives up (the trainer then fails at the lag).
  static constexpr std::chrono::milliseconds kStorePatience{10 * 60 * 1000};
  // Finishes the writes queued (a clean stop commits the last version); a commit still
  // waiting for other members' shards gives up after kClosingWait, or at once when the group
  // broke (the members that would write them are gone).
  ~shard_checkpointer();
  shard_checkpointer(const shard_checkpointer&) = delete;
  shard_checkpointer& operator=(const shard_checkpointer&) = delete;

  // Queues this member's shard of `version`; shard 0 also commits it with `meta`, after
  // putting `objects` (objects the meta names, such as the reward curve's new segments).
  // Blocks only when 2 * max_lag + 2 writes wait already (memory stays bounded when a
  // member's store is slower than the group).
  void submit(uint64_t version, std::vector<store::checkpoint_part> parts, nlohmann::json meta,
              std::vector<named_object> objects = {});
  // The same, now, on the calling thread (a restore writing the restored state renumbered).
  status write_now(uint64_t version, const std::vector<store::checkpoint_part>& parts,
                   const nlohmann::json& meta, const std::vector<named_object>& objects = {});
  // Member 0, before announcing `version`: returns at once while version - durable() <=
  // max_lag; else logs why and waits until it is (only for the writes it needs). A store
  // that does not answer is waited out: its writes are retried (backoff up to 2 s) and the
  // wait says so every 10 s with the store's error; once the store answers the checkpoints
  // catch up in order and the step goes on. An error when a write gave up (the store refused
  // it for `patience`, 10 minutes by default) or the group broke (the version must not be
  // announced: a crash would then lose more than the lag).
  status throttle(uint64_t version);
  // Waits until every write queued so far is done (committed, or given up).
  void flush() { writer_->flush(); }
  // Member 0: the newest committed version; other members: the newest shard written.
  uint64_t durable() const { return durable_->load(); }
  void set_durable(uint64_t version) { durable_->store(version); }
  uint64_t max_lag() const { return max_lag_; }
  uint32_t num_shards() const { return num_shards_; }
  uint64_t num_written() const { return writer_->num_written(); }
  uint64_t num_failed() const { return writer_->num_failed(); }
  // Called on the writer thread, with the write named and its error, when a queued write gave
  // up while the group stands (a store that refuses for good, such as a full disk). A member
  // other than 0 tells the group with it: member 0's commit would otherwise wait for that
  // shard's marker, and with job.max_durability_lag 0 its step with it (tests/apps
  // moerl_up_faults_test.py, disk_full). Set before the first submit.
  void on_refused(std::function<void(const std::string&)> tell) {
    refused_ = std::make_shared<const std::function<void(const std::string&)>>(std::move(tell));
  }
  uint64_t num_throttled() const { return throttled_.load(); }
  // Tries of a checkpoint write the store refused, and the newest refusal ("" when the
  // store answers).
  uint64_t num_store_failures() const { return outage_->failures(); }
  std::string store_failing() const { return outage_->failing(); }

 private:
  // Writes the shard and (shard 0) commits once every shard is durable.
  static status write(const std::shared_ptr<store::object_store>& store, const std::string& prefix,
                      uint32_t shard, uint32_t num_shards, uint64_t keep_every,
                      const std::shared_ptr<std::atomic<uint64_t>>& durable,
                      const std::shared_ptr<std::atomic<int64_t>>& give_up_at_ms,
                      const std::shared_ptr<const std::atomic<bool>>& group_abort,
                      const std::shared_ptr<store_outage>& outage,
                      std::chrono::milliseconds patience, uint64_t version,
                      const std::vector<store::checkpoint_part>& parts, const nlohmann::json& meta,
                      const std::vector<named_object>& objects);

  std::shared_ptr<store::object_store> store_;
  std::string prefix_;
  uint32_t shard_, num_shards_;
  uint64_t max_lag_, keep_every_;
  std::chrono::milliseconds patience_;
  std::atomic<uint64_t> throttled_{0};  // read by stats (and tests) beside the step loop
  std::shared_ptr<store_outage> outage_ = std::make_shared<store_outage>();
  std::shared_ptr<std::atomic<uint64_t>> durable_ = std::make_shared<std::atomic<uint64_t>>(0);
  // Steady-clock ms after which a waiting commit gives up (set by the destructor; 0: never).
  std::shared_ptr<std::atomic<int64_t>> give_up_at_ms_ = std::make_shared<std::atomic<int64_t>>(0);
  std::shared_ptr<const std::atomic<bool>> group_abort_;
  std::shared_ptr<const std::function<void(const std::string&)>> refused_;  // on_refused's
  std::unique_ptr<durable_writer> writer_;
};

// Shard `shard` of committed checkpoint `version` under ckpt_prefix: the manifest and marker
// checked, then only this shard's parts read (each against its sha256). The manifest comes
// back too (its meta says the shape the checkpoint was written with).
result<std::pair<store::checkpoint_manifest, std::vector<store::checkpoint_part>>> read_own_shard(
    const store::object_store& store, const std::string& ckpt_prefix, uint64_t version,
    uint32_t shard);

}  // namespace moerl::job
