// One libzmq context, shared by every ZeroMQ plane of a process (samples, reward hop, env,
// weight caches, admin). Thread-safe, as libzmq's context is; sockets made from it are not.
#pragma once

#include <memory>

#include "common/error.h"

namespace moerl::zmq {

class zmq_context {
 public:
  static result<std::shared_ptr<zmq_context>> create();
  ~zmq_context();
  void* handle() const { return ctx_; }

 private:
  explicit zmq_context(void* ctx) : ctx_(ctx) {}
  void* ctx_;
};

}  // namespace moerl::zmq
