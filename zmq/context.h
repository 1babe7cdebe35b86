// One libzmq context, shared by every ZeroMQ plane of a process (samples, reward hop, env,
// weight caches, admin). Thread-safe, as libzmq's context is; sockets made from it are not.
//
// A context made with plane keys (zmq/plane_keys.h) secures every socket its planes make:
// each socket is passed to secure_server() before it binds or secure_client() before it
// connects (both do nothing without keys: loopback-only runs stay plain, and say so in their
// provenance). From its first server socket on, the context runs the ZAP handler that admits
// only the cluster's client key (a context that only connects, like a console call's, has none).
// Every server socket is also bounded in the connections one peer address holds
// (node.zmq_max_connections_per_peer, zmq/connection_limit.h), plain or CURVE.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "common/error.h"
#include "zmq/connection_limit.h"
#include "zmq/plane_keys.h"

namespace moerl::zmq {

class zmq_context {
 public:
  static result<std::shared_ptr<zmq_context>> create(std::optional<plane_keys> keys = std::nullopt);
  ~zmq_context();
  void* handle() const { return ctx_; }
  bool encrypted() const { return keys_.has_value(); }
  // CURVE server options (this cluster's server key pair, ZAP domain "moerl") on `sock`.
  status secure_server(void* sock) const;
  // CURVE client options (the cluster's client key pair, the server's public key) on `sock`.
  status secure_client(void* sock) const;
  // Handshakes the ZAP handler refused: a peer that knew the server's public key but not the
  // cluster's client key.
  uint64_t num_refused_handshakes() const { return refused_->load(); }
  // Connections a server socket shut down because their peer address already held
  // node.zmq_max_connections_per_peer of them (zmq/connection_limit.h).
  uint64_t num_refused_connections() const;

 private:
  zmq_context(void* ctx, std::optional<plane_keys> keys) : ctx_(ctx), keys_(std::move(keys)) {}
  void* ctx_;
  std::optional<plane_keys> keys_;
  std::shared_ptr<std::atomic<uint64_t>> refused_ = std::make_shared<std::atomic<uint64_t>>(0);
  std::shared_ptr<std::atomic<bool>> stop_ = std::make_shared<std::atomic<bool>>(false);
  // Started by the first secure_server(); its bind error, if any, answers every later call.
  mutable std::mutex zap_mu_;
  mutable std::thread zap_;
  mutable std::optional<error> zap_failure_;
  // Started by the first secure_server() while a per-peer bound is set; ends with the context.
  mutable std::mutex limiter_mu_;
  mutable std::unique_ptr<connection_limiter> limiter_;
};

}  // namespace moerl::zmq
