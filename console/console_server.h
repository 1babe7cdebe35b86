// The coordinator's admin endpoint: a ZeroMQ REP socket at console.address that turns each
// messages::admin_request into a request to the coordinator (console/admin_channel.h) and answers
// with its admin_reply. Undecodable input gets a malformed_message reply, never a crash, and the
// coordinator keeps running whatever the console sends.
// Runs on its own thread; stop() (or the destructor) ends it.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "common/error.h"
#include "console/admin_channel.h"
#include "zmq/context.h"

namespace moerl::console {

class console_server {
 public:
  // Binds `address` now (so a bind failure is reported at start), then serves; with `keys`
  // (zmq::admin_plane_keys: an address off loopback) under CURVE.
  static result<std::unique_ptr<console_server>> start(
      admin_caller_factory coordinator, const std::string& address, int request_timeout_ms,
      std::optional<zmq::plane_keys> keys = std::nullopt);
  ~console_server();
  void stop();
  const std::string& address() const { return address_; }

 private:
  console_server() = default;
  void serve();
  admin_caller_factory coordinator_;
  std::shared_ptr<zmq::zmq_context> zctx_;
  void* sock_ = nullptr;
  std::string address_;
  int timeout_ms_ = 5000;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace moerl::console
