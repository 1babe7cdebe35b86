// The rollout -> reward hop of the sample plane. A rollout pushes each sample, together with
// the endpoint of the shard its lease names, to the reward nodes (ZeroMQ PUSH, round-robin,
// bounded by the high-water mark, so a slow reward node blocks producers instead of growing
// a queue). A reward node pulls them, scores them and forwards them to the shard through
// the credit-controlled sample_producer (ledger/sample_plane.h).
// Frames: [shard endpoint][moerl_messages sample bytes]... (whole groups' samples, one message:
// a group, or the groups of a unit that were generated together).
// Threading: each object is owned by one thread at a time (ZeroMQ sockets are not
// thread-safe); handing one to a restarted actor's thread is fine (a full barrier happens
// between the old owner's exit and the new owner's start).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "ledger/sample_plane.h"
#include "zmq/context.h"
#include "zmq/server_socket.h"

namespace moerl::ledger {

class reward_push {
 public:
  // Connects to every endpoint; send timeout bounds a blocked send.
  static result<std::unique_ptr<reward_push>> connect(std::shared_ptr<zmq::zmq_context> ctx,
                                                      const std::vector<std::string>& endpoints,
                                                      int send_timeout_ms);
  ~reward_push();
  // Whole groups' samples (1..kMaxSamplesPerMessage encoded samples, all for one shard) as
  // one message; errc::capacity_exceeded when no reward node took it within the send timeout.
  status send(const std::string& shard_endpoint, const std::vector<std::string>& sample_bytes);

 private:
  reward_push() = default;
  std::shared_ptr<zmq::zmq_context> ctx_;
  void* sock_ = nullptr;
};

class reward_pull {
 public:
  // Binds `endpoint` ("tcp://127.0.0.1:*" picks a port; endpoint() tells which).
  static result<std::unique_ptr<reward_pull>> bind(std::shared_ptr<zmq::zmq_context> ctx,
                                                   const std::string& endpoint);
  // One message, [shard endpoint][sample bytes]..., if one arrives within timeout_ms; one of
  // another shape (no sample, or more than kMaxSamplesPerMessage) is dropped and counted.
  result<std::optional<std::vector<std::string>>> poll(int timeout_ms) {
    return sock_->poll_parts(timeout_ms, 2, 1 + kMaxSamplesPerMessage);
  }
  const std::string& endpoint() const { return sock_->endpoint(); }
  uint64_t num_bad_frames() const { return sock_->num_bad_frames(); }

 private:
  explicit reward_pull(std::unique_ptr<zmq::zmq_server_socket> sock) : sock_(std::move(sock)) {}
  std::unique_ptr<zmq::zmq_server_socket> sock_;
};

}  // namespace moerl::ledger
