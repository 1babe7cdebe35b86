#include "job/shard_checkpointer.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/log.h"

namespace moerl::job {

namespace {
// How long member 0's commit waits for the other members' shard markers. Long, because a
// member's store may be slow; a group that broke ends the wait at once (its abort flag).
constexpr auto kShardWait = std::chrono::minutes(10);
constexpr auto kShardPoll = std::chrono::milliseconds(20);
// The longest pause between two tries of a write the store refused (doubling from 100 ms).
constexpr auto kOutageBackoffMax = std::chrono::milliseconds(2000);
// How often a trainer waiting at the lag for a store that does not answer says so again.
constexpr int64_t kOutageLogEveryMs = 10000;
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
                                       std::shared_ptr<const std::atomic<bool>> group_abort,
                                       std::chrono::milliseconds patience)
    : store_(std::move(store)),
      prefix_(std::move(ckpt_prefix)),
      shard_(shard),
      num_shards_(num_shards),
      max_lag_(max_lag),
      keep_every_(keep_every),
      patience_(patience),
      group_abort_(std::move(group_abort)),
      writer_(std::make_unique<durable_writer>(2 * max_lag + 2)) {}

shard_checkpointer::~shard_checkpointer() {
  give_up_at_ms_->store(steady_now_ms() + kClosingWaitMs);
  writer_.reset();  // finishes the queued writes
}

status shard_checkpointer::write(
    const std::shared_ptr<store::object_store>& store, const std::string& prefix, uint32_t shard,
    uint32_t num_shards, uint64_t keep_every, const std::shared_ptr<std::atomic<uint64_t>>& durable,
    const std::shared_ptr<std::atomic<int64_t>>& give_up_at_ms,
    const std::shared_ptr<const std::atomic<bool>>& group_abort,
    const std::shared_ptr<store_outage>& outage, std::chrono::milliseconds patience,
    uint64_t version, const std::vector<store::checkpoint_part>& parts, const nlohmann::json& meta,
    const std::vector<named_object>& objects) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  auto giving_up = [&] {
    const int64_t give_up = give_up_at_ms->load();
    return (give_up > 0 && steady_now_ms() > give_up) || (group_abort && group_abort->load()) ||
           std::chrono::steady_clock::now() > deadline;
  };
  // A store that does not answer (down, unreachable, full) is waited out: the shard is
  // written again after a backoff until the store takes it, so the checkpoints catch up once
  // it is back and no version's checkpoint is skipped. The step loop runs on meanwhile, up to
  // job.max_durability_lag versions (throttle() says why it then waits).
  // A retry puts the same bytes again without uncommitting the version: the refused try may
  // have landed after all and member 0 committed the version meanwhile.
  auto until_taken = [&](const std::string& what, auto&& put) -> status {
    auto backoff = std::chrono::milliseconds(100);
    for (bool again = false;; again = true) {
      status written = put(again);
      if (written) return written;
      if (!store_outage::is_outage(written.err())) return written;  // not the store's state
      outage->failed(what + ": " + written.err().to_string());
      if (giving_up()) return written;
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, kOutageBackoffMax);
    }
  };
  // The objects the commit's meta names (the reward curve's new segments) go first.
  for (const auto& o : objects)
    if (auto st = until_taken(o.key, [&](bool) { return store->put(o.key, o.bytes); }); !st)
      return st;
  if (auto st = until_taken("checkpoint shard " + std::to_string(shard) + " of policy version " +
                                std::to_string(version),
                            [&](bool again) -> status {
                              auto w = store::write_checkpoint_shard(*store, prefix, version, shard,
                                                                     num_shards, parts, again);
                              if (!w) return w.err();
                              return ok_status();
                            });
      !st)
    return st;
  outage->answered();
  auto backoff = std::chrono::milliseconds(100);
  if (shard != 0) {
    durable->store(std::max(durable->load(), version));
    return ok_status();
  }
  // Member 0 commits once every other member's marker is there (they write in parallel).
  for (;;) {
    auto m = store::commit_sharded_checkpoint(*store, prefix, version, num_shards, meta);
    if (m) break;
    const bool store_failed = m.err().code != errc::not_found;
    if (store_failed && !store_outage::is_outage(m.err())) return m.err();  // a torn marker etc.
    if (store_failed)
      outage->failed("commit of policy version " + std::to_string(version) + ": " +
                     m.err().to_string());
    if (giving_up())
      return store_failed ? m.err()
                          : error{errc::timeout, m.err().message + " (gave up waiting for it)"};
    std::this_thread::sleep_for(store_failed ? backoff : kShardPoll);
    if (store_failed) backoff = std::min(backoff * 2, kOutageBackoffMax);
  }
  outage->answered();
  const uint64_t before = durable->exchange(std::max(durable->load(), version));
  // Of the older ones only every job.checkpoint_every-th stays. Best effort: one left behind
  // costs space only.
  if (before > 0 && before < version && keep_every > 0 && before % keep_every != 0)
    (void)store::remove_checkpoint(*store, prefix, before);
  return ok_status();
}

void shard_checkpointer::submit(uint64_t version, std::vector<store::checkpoint_part> parts,
                                nlohmann::json meta, std::vector<named_object> objects) {
  auto shared_parts = std::make_shared<const std::vector<store::checkpoint_part>>(std::move(parts));
  std::string what = "checkpoint shard " + std::to_string(shard_) + " of policy version " +
                     std::to_string(version);
  writer_->submit(
      what,
      [store = store_, prefix = prefix_, shard = shard_, n = num_shards_, keep = keep_every_,
       durable = durable_, give_up = give_up_at_ms_, group_abort = group_abort_, outage = outage_,
       patience = patience_, refused = refused_, what, version, shared_parts,
       meta = std::move(meta), objects = std::move(objects)]() -> status {
        status st = write(store, prefix, shard, n, keep, durable, give_up, group_abort, outage,
                          patience, version, *shared_parts, meta, objects);
        if (!st && refused && !(group_abort && group_abort->load()))
          (*refused)(what + ": " + st.err().to_string());
        return st;
      });
}

status shard_checkpointer::write_now(uint64_t version,
                                     const std::vector<store::checkpoint_part>& parts,
                                     const nlohmann::json& meta,
                                     const std::vector<named_object>& objects) {
  return write(store_, prefix_, shard_, num_shards_, keep_every_, durable_, give_up_at_ms_,
               group_abort_, outage_, patience_, version, parts, meta, objects);
}

bool store_outage::is_outage(const error& e) {
  // A full store does not empty itself: the run ends with the cause named at once (issue 11's
  // disk_full case) rather than wait for an operator. An unreachable one comes back.
  if (e.message.find(std::strerror(ENOSPC)) != std::string::npos) return false;
  return e.code == errc::io_error || e.code == errc::timeout;
}

void store_outage::failed(std::string what) {
  std::lock_guard<std::mutex> g(mu_);
  if (last_error_.empty())
    logger("trainer")->warn("the store does not take checkpoint writes ({}): retrying", what);
  last_error_ = std::move(what);
  ++failures_;
}

void store_outage::answered() {
  std::lock_guard<std::mutex> g(mu_);
  if (!last_error_.empty())
    logger("trainer")->info("the store takes checkpoint writes again (after {} failed tries)",
                            failures_);
  last_error_.clear();
}

std::string store_outage::failing() const {
  std::lock_guard<std::mutex> g(mu_);
  return last_error_;
}

uint64_t store_outage::failures() const {
  std::lock_guard<std::mutex> g(mu_);
  return failures_;
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
  int64_t said_at = 0;
  while (version > durable() + max_lag_) {
    // The store does not answer: say so (again every kOutageLogEveryMs) with its error; the
    // writes are retried, and the step goes on once the store took enough of them.
    if (const std::string why = outage_->failing(); !why.empty()) {
      if (steady_now_ms() - said_at >= kOutageLogEveryMs) {
        said_at = steady_now_ms();
        logger("trainer")->warn(
            "policy version {} waits for the store, which does not take checkpoint writes ({}); "
            "retrying, the trainer goes on once it answers",
            version, why);
      }
    }
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
