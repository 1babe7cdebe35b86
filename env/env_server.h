// An env node's socket: a ZeroMQ ROUTER that rollout workers' DEALERs connect to
// (env/ENV.md). Frames in: [client identity][request]; out: [client identity][reply].
// Threading: owned by one thread at a time (the env router actor's current incarnation);
// it lives in the node context so a restarted router keeps the bound endpoint.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "common/error.h"
#include "zmq/context.h"
#include "zmq/server_socket.h"

namespace moerl::env {

class env_server {
 public:
  // Binds `endpoint` ("tcp://127.0.0.1:*" picks a port; endpoint() tells which).
  static result<std::unique_ptr<env_server>> bind(std::shared_ptr<zmq::zmq_context> ctx,
                                                  const std::string& endpoint);
  // One (client identity, request bytes) if one arrives within timeout_ms. A frame that is
  // not two parts is dropped and counted.
  result<std::optional<std::pair<std::string, std::string>>> poll(int timeout_ms) {
    return sock_->poll(timeout_ms);
  }
  // A reply to a client that is gone is dropped by ZeroMQ (ROUTER_MANDATORY is off).
  status reply(const std::string& client, const std::string& bytes);
  const std::string& endpoint() const { return sock_->endpoint(); }
  uint64_t num_bad_frames() const { return sock_->num_bad_frames(); }

 private:
  explicit env_server(std::unique_ptr<zmq::zmq_server_socket> sock) : sock_(std::move(sock)) {}
  std::unique_ptr<zmq::zmq_server_socket> sock_;
};

}  // namespace moerl::env
