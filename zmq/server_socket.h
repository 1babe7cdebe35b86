// The server half shared by the reward node's PULL (ledger/reward_hop.h) and the env node's
// ROUTER (env/env_server.h): bind a socket and read the endpoint it got, and receive one
// message at a time. The env plane frames every message as two parts ([client identity]
// [request]), the reward hop as [shard endpoint][sample]... (a group's samples in one
// message); anything else is dropped and counted, so a stray sender cannot wedge the node.
// Threading: a socket is used by one thread at a time, as ZeroMQ requires.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "zmq/context.h"

namespace moerl::zmq {

class zmq_server_socket {
 public:
  // A socket of `type` (ZMQ_PULL, ZMQ_ROUTER; `type_name` names it in errors) with linger 0
  // and the high-water marks given (0 keeps ZeroMQ's default), bound to `endpoint`
  // ("tcp://127.0.0.1:*" picks a port; endpoint() tells which).
  static result<std::unique_ptr<zmq_server_socket>> bind(std::shared_ptr<zmq::zmq_context> ctx,
                                                         int type, const char* type_name,
                                                         const std::string& endpoint, int rcv_hwm,
                                                         int snd_hwm);
  ~zmq_server_socket();
  // One two-part message if one arrives within timeout_ms; a message of another shape is
  // dropped and counted (num_bad_frames).
  result<std::optional<std::pair<std::string, std::string>>> poll(int timeout_ms);
  // One message of min_parts..max_parts parts if one arrives within timeout_ms; a message of
  // another shape is dropped and counted (num_bad_frames).
  result<std::optional<std::vector<std::string>>> poll_parts(int timeout_ms, size_t min_parts,
                                                             size_t max_parts);
  void* handle() const { return sock_; }
  const std::string& endpoint() const { return endpoint_; }
  uint64_t num_bad_frames() const { return num_bad_frames_; }

 private:
  zmq_server_socket() = default;
  std::shared_ptr<zmq::zmq_context> ctx_;
  void* sock_ = nullptr;
  std::string type_name_;
  std::string endpoint_;
  uint64_t num_bad_frames_ = 0;
};

}  // namespace moerl::zmq
