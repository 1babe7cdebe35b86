// The connections one listener holds open, per peer address and in total, each with a bound.
// A listener asks admit() for every connection it accepts and closes at once the ones refused
// (the refusal is counted by cause); release() gives a connection's slot back when it ends.
// The table holds only addresses with an open connection, so it is bounded by the process's
// file descriptors however many addresses come and go. Thread-safe: the HTTP console admits on
// its listening thread and releases on its workers.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace moerl {

class peer_connection_limit {
 public:
  enum class verdict { admitted, too_many_connections, too_many_from_peer };

  // max_total, max_per_peer: connections held at once (0: no bound).
  peer_connection_limit(int64_t max_total, int64_t max_per_peer)
      : max_total_(max_total), max_per_peer_(max_per_peer) {}

  // Counts a new connection from `peer`, or says (and counts) why it is refused.
  verdict admit(const std::string& peer) {
    std::lock_guard<std::mutex> lock(mu_);
    if (max_total_ > 0 && open_ >= max_total_) {
      ++refused_too_many_;
      return verdict::too_many_connections;
    }
    int64_t& from_peer = per_peer_[peer];
    if (max_per_peer_ > 0 && from_peer >= max_per_peer_) {
      ++refused_from_peer_;
      return verdict::too_many_from_peer;
    }
    ++from_peer;
    ++open_;
    return verdict::admitted;
  }

  // The end of a connection admit() admitted.
  void release(const std::string& peer) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = per_peer_.find(peer);
    if (it == per_peer_.end()) return;  // a bug elsewhere must not make counts negative
    if (--it->second <= 0) per_peer_.erase(it);
    --open_;
  }

  int64_t open() const {
    std::lock_guard<std::mutex> lock(mu_);
    return open_;
  }
  uint64_t refused_too_many_connections() const {
    std::lock_guard<std::mutex> lock(mu_);
    return refused_too_many_;
  }
  uint64_t refused_too_many_from_peer() const {
    std::lock_guard<std::mutex> lock(mu_);
    return refused_from_peer_;
  }

 private:
  const int64_t max_total_, max_per_peer_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, int64_t> per_peer_;  // only addresses with open connections
  int64_t open_ = 0;
  uint64_t refused_too_many_ = 0, refused_from_peer_ = 0;
};

}  // namespace moerl
