#include "job/shard_checkpointer.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/log.h"

namespace moerl::job {

namespace {
// How long member 0's commit waits for the other members' shard markers. Long, because a
// member's store may be slow; a group that broke ends the wait at once (its abort flag).
constexpr auto kShardWait = std::chrono::minutes(10);
constexpr auto kShardPoll = std::chrono::milliseconds(20);
// How long a stopping trainer's last commit still waits for the members' shards: they write
// theirs while member 0 stops (its stop command follows the commit).
constexpr int64_t kClosingWaitMs = 30000;

int64_t steady_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

shard_checkpointer::shard_checkpointer(std::shared_ptr<store::object_store> store,
                                       std::string ckpt_prefix, uint32_t shard, uint32_t num_shards,
                                       uint64_t max_lag, uint64_t keep_every,
                                       std::shared_ptr<const std::atomic<bool>> group_abort)
    : store_(std::move(store)),
      prefix_(std::move(ckpt_prefix)),
      shard_(shard),
      num_shards_(num_shards),
      max_lag_(max_lag),
      keep_every_(keep_every),
      group_abort_(std::move(group_abort)),
      writer_(std::make_unique<durable_writer>(2 * max_lag + 2)) {}

shard_checkpointer::~shard_checkpointer() {
  give_up_at_ms_->store(steady_now_ms() + kClosingWaitMs);
  writer_.reset();  // finishes the queued writes
}

status shard_checkpointer::write(const std::shared_ptr<store::object_store>& store,
                                 const std::string& prefix, uint32_t shard, uint32_t num_shards,
                                 uint64_t keep_every,
                                 const std::shared_ptr<std::atomic<uint64_t>>& durable,
                                 const std::shared_ptr<std::atomic<int64_t>>& give_up_at_ms,
                                 const std::shared_ptr<const std::atomic<bool>>& group_abort,
                                 uint64_t version, const std::vector<store::checkpoint_part>& parts,
                                 const nlohmann::json& meta) {
  auto written = store::write_checkpoint_shard(*store, prefix, version, shard, num_shards, parts);
  if (!written) return written.err();
  if (shard != 0) {
    durable->store(std::max(durable->load(), version));
    return ok_status();
  }
  // Member 0 commits once every other member's marker is there (they write in parallel).
  const auto deadline = std::chrono::steady_clock::now() + kShardWait;
  for (;;) {
    auto m = store::commit_sharded_checkpoint(*store, prefix, version, num_shards, meta);
    if (m) break;
    if (m.err().code != errc::not_found) return m.err();
    const int64_t give_up = give_up_at_ms->load();
    if ((give_up > 0 && steady_now_ms() > give_up) || (group_abort && group_abort->load()) ||
        std::chrono::steady_clock::now() > deadline)
      return error{errc::timeout, m.err().message + " (gave up waiting for it)"};
    std::this_thread::sleep_for(kShardPoll);
  }
  const uint64_t before = durable->exchange(std::max(durable->load(), version));
  // Of the older ones only every job.checkpoint_every-th stays. Best effort: one left behind
  // costs space only.
  if (before > 0 && before < version && keep_every > 0 && before % keep_every != 0)
    (void)store::remove_checkpoint(*store, prefix, before);
  return ok_status();
}

void shard_checkpointer::submit(uint64_t version, std::vector<store::checkpoint_part> parts,
                                nlohmann::json meta) {
  auto shared_parts = std::make_shared<const std::vector<store::checkpoint_part>>(std::move(parts));
  writer_->submit(
      "checkpoint shard " + std::to_string(shard_) + " of policy version " +
          std::to_string(version),
      [store = store_, prefix = prefix_, shard = shard_, n = num_shards_, keep = keep_every_,
       durable = durable_, give_up = give_up_at_ms_, group_abort = group_abort_, version,
       shared_parts, meta = std::move(meta)]() -> status {
        return write(store, prefix, shard, n, keep, durable, give_up, group_abort, version,
                     *shared_parts, meta);
      });
}

status shard_checkpointer::write_now(uint64_t version,
                                     const std::vector<store::checkpoint_part>& parts,
                                     const nlohmann::json& meta) {
  return write(store_, prefix_, shard_, num_shards_, keep_every_, durable_, give_up_at_ms_,
               group_abort_, version, parts, meta);
}

status shard_checkpointer::throttle(uint64_t version) {
  if (version <= durable() + max_lag_) return ok_status();
  ++throttled_;
  logger("trainer")->warn(
      "policy version {} waits for the store: {} version(s) announced or ready are not committed "
      "yet (newest committed {}), job.max_durability_lag is {}",
      version, version - durable(), durable(), max_lag_);
  // Waits for the commits it needs, not for every queued write (a later version's commit may
  // wait for a member that is gone).
  while (version > durable() + max_lag_) {
    if (group_abort_ && group_abort_->load())
      return error{errc::peer_dead, "policy version " + std::to_string(version) +
                                        " not announced: the trainer group lost a member while "
                                        "its checkpoints were behind"};
    if (writer_->idle())
      return error{errc::io_error,
                   "the store did not take the checkpoints of policy versions " +
                       std::to_string(durable() + 1) + ".." + std::to_string(version) +
                       " (job.max_durability_lag " + std::to_string(max_lag_) +
                       " reached; the last failure: " + writer_->last_failure() + ")"};
    std::this_thread::sleep_for(kShardPoll);
  }
  return ok_status();
}

result<std::pair<store::checkpoint_manifest, std::vector<store::checkpoint_part>>> read_own_shard(
    const store::object_store& store, const std::string& ckpt_prefix, uint64_t version,
    uint32_t shard) {
  auto m = store::verify_checkpoint_manifest(store, ckpt_prefix, version);
  if (!m) return m.err();
  auto parts = store::read_checkpoint_shard(store, ckpt_prefix, *m, shard);
  if (!parts) return parts.err();
  return std::make_pair(std::move(*m), std::move(*parts));
}

}  // namespace moerl::job
