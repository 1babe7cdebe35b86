// Per-client request rate of the HTTP console (console.http_requests_per_s): a token bucket
// per client address, `rate` tokens a second and room for a burst of 2 x rate. A request that
// finds its bucket empty is refused (the console answers 429) and counted. The table of
// buckets is bounded: past kMaxPeers addresses the full (idle) buckets are forgotten, and if
// none is, every new address shares one overflow bucket, so a flood of spoofed or many
// addresses costs bounded memory and is itself limited. Thread-safe (httplib's worker threads).
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <mutex>
#include <string>
#include <unordered_map>

namespace moerl::console {

class peer_rate_limit {
 public:
  static constexpr size_t kMaxPeers = 4096;
  // rate 0: no limit.
  explicit peer_rate_limit(double rate) : rate_(rate), burst_(2 * rate) {}

  // Whether `peer` may make a request at `now_ms` (a monotonic clock); false is counted.
  bool allow(const std::string& peer, int64_t now_ms) {
    if (rate_ <= 0) return true;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = buckets_.find(peer);
    if (it == buckets_.end()) {
      if (buckets_.size() >= kMaxPeers) forget_idle(now_ms);
      it = buckets_.size() < kMaxPeers ? buckets_.emplace(peer, bucket{burst_, now_ms}).first
                                       : buckets_.try_emplace("(overflow)", burst_, now_ms).first;
    }
    bucket& b = it->second;
    refill(b, now_ms);
    if (b.tokens < 1) {
      ++refused_;
      return false;
    }
    b.tokens -= 1;
    return true;
  }
  uint64_t refused() const {
    std::lock_guard<std::mutex> lock(mu_);
    return refused_;
  }
  size_t peers() const {
    std::lock_guard<std::mutex> lock(mu_);
    return buckets_.size();
  }

 private:
  struct bucket {
    bucket(double t, int64_t at) : tokens(t), at_ms(at) {}
    double tokens;
    int64_t at_ms;
  };
  void refill(bucket& b, int64_t now_ms) const {
    if (now_ms > b.at_ms) {
      b.tokens = std::min(burst_, b.tokens + rate_ * static_cast<double>(now_ms - b.at_ms) / 1000);
      b.at_ms = now_ms;
    }
  }
  void forget_idle(int64_t now_ms) {
    for (auto it = buckets_.begin(); it != buckets_.end();) {
      refill(it->second, now_ms);
      it = it->second.tokens >= burst_ ? buckets_.erase(it) : std::next(it);
    }
  }
  const double rate_, burst_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, bucket> buckets_;
  uint64_t refused_ = 0;
};

}  // namespace moerl::console
