#include "job/weights_feed.h"

#include <chrono>

#include "common/log.h"

namespace moerl::job {
namespace {

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

constexpr size_t kVersionsKept = 3;      // bytes of the newest few (a lease may name v-1)
constexpr size_t kHoldTimesKept = 4096;  // when each version arrived, for the report
constexpr auto kPrefetchPoll = std::chrono::milliseconds(20);
// A replacement node's first fetch waits this long for the list of caches rather than go
// to the store because it asked before it knew them.
constexpr auto kFirstDirectoryWait = std::chrono::milliseconds(3000);

}  // namespace

weights_feed::weights_feed(std::shared_ptr<weights::cache_directory> caches, int timeout_ms,
                           bool same_host_shm,
                           std::function<result<std::string>(uint64_t)> store_read,
                           weights::shard_assembler assemble)
    : caches_(std::move(caches)),
      store_read_(std::move(store_read)),
      reader_(caches_ ? caches_->zmq() : nullptr, timeout_ms, same_host_shm) {
  reader_.set_assembler(std::move(assemble));
  if (caches_ && caches_->peer()) {
    fanout_ = std::make_unique<weights::fanout_reader>(caches_->zmq(), caches_->peer(), timeout_ms,
                                                       timeout_ms);
    // A sharded version comes from the caches through reader_, which assembles it; fanout_
    // then serves it whole to the readers below this one.
    fanout_->set_sharded_reader(
        [this](uint64_t v) { return reader_.fetch(v, caches_->caches(), nullptr); });
  }
  if (caches_) prefetcher_ = std::thread([this] { prefetch_loop(); });
}

weights_feed::~weights_feed() {
  stop_ = true;
  if (prefetcher_.joinable()) prefetcher_.join();
}

result<std::shared_ptr<const std::string>> weights_feed::get(uint64_t version) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (auto it = held_.find(version); it != held_.end()) return it->second.bytes;
  }
  std::lock_guard<std::mutex> f(fetch_mu_);
  return fetch_locked(version);
}

result<std::shared_ptr<const std::string>> weights_feed::fetch_locked(uint64_t version) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (auto it = held_.find(version); it != held_.end()) return it->second.bytes;
  }
  weights::reader_counters before;
  {
    std::lock_guard<std::mutex> g(mu_);
    before = counters_;
  }
  auto got = caches_ ? fetch_from_caches(version) : fetch_from_store(version);
  std::lock_guard<std::mutex> g(mu_);
  if (caches_) {
    counters_ = reader_.counters();  // with fan-out: the sharded versions it read
    if (fanout_) counters_ += fanout_->counters();
  }
  if (!got) return got.err();
  const int64_t now = unix_ms();
  held_[version] = {got->bytes, got->source, now};
  while (held_.size() > kVersionsKept) held_.erase(held_.begin());
  held_at_unix_ms_.emplace(version, now);
  while (held_at_unix_ms_.size() > kHoldTimesKept) held_at_unix_ms_.erase(held_at_unix_ms_.begin());
  // What this version's fetch read from where (fetches are serialised by fetch_mu_, so the
  // counters' growth since `before` is this fetch's, a failed earlier attempt's excluded).
  held_from_[version] = {counters_.bytes_from_cache - before.bytes_from_cache,
                         counters_.bytes_from_peer - before.bytes_from_peer,
                         counters_.bytes_from_store - before.bytes_from_store};
  while (held_from_.size() > kHoldTimesKept) held_from_.erase(held_from_.begin());
  if (!first_weights_unix_ms_) first_weights_unix_ms_ = now;
  logger("rollout")->debug("holds policy version {} ({} bytes from the {})", version,
                           got->bytes->size(), got->source);
  return got->bytes;
}

result<weights::fetched_version> weights_feed::fetch_from_caches(uint64_t version) {
  caches_->wait_refreshed(kFirstDirectoryWait);
  auto from_store = [&] { return store_read_(version); };
  if (!fanout_) return reader_.fetch(version, caches_->caches(), from_store);
  auto sources = weights::fanout_sources(caches_->readers(), caches_->peer_endpoint(),
                                         caches_->caches(), caches_->fanout_degree());
  return fanout_->fetch(version, sources, from_store);
}

result<weights::fetched_version> weights_feed::fetch_from_store(uint64_t version) {
  auto s = store_read_(version);
  if (!s) return s.err();
  std::lock_guard<std::mutex> g(mu_);
  ++counters_.num_versions;
  counters_.bytes_from_store += s->size();
  return weights::fetched_version{std::make_shared<const std::string>(std::move(*s)), "store",
                                  "store"};
}

void weights_feed::prefetch_loop() {
  int64_t last_err_log = 0;
  while (!stop_) {
    std::this_thread::sleep_for(kPrefetchPoll);
    const uint64_t v = caches_->announced();
    if (v == 0) continue;
    {
      std::lock_guard<std::mutex> g(mu_);
      if (!held_.empty() && held_.rbegin()->first >= v) continue;
    }
    std::lock_guard<std::mutex> f(fetch_mu_);
    auto got = fetch_locked(v);
    if (!got && unix_ms() - last_err_log > 2000) {
      last_err_log = unix_ms();
      logger("rollout")->warn("prefetch of policy version {}: {}", v, got.err().to_string());
    }
  }
}

nlohmann::json weights_feed::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  nlohmann::json held = nlohmann::json::object();
  for (auto& [v, t] : held_at_unix_ms_) held[std::to_string(v)] = t;
  nlohmann::json from = nlohmann::json::object();
  // [cache, peer, store] per version: compact, as a node sends this with every stats report.
  for (auto& [v, b] : held_from_) from[std::to_string(v)] = {b[0], b[1], b[2]};
  nlohmann::json out = counters_.to_json();
  out["held_unix_ms"] = held;
  out["held_bytes_from"] = from;
  out["first_weights_unix_ms"] = first_weights_unix_ms_;
  return out;
}

}  // namespace moerl::job
