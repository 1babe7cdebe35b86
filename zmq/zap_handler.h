// The ZAP handler (ZeroMQ RFC 27) of a context whose planes use CURVE: libzmq asks it, over
// inproc://zeromq.zap.01, whether each handshake's client key may connect. It admits exactly
// the cluster's client public key and refuses every other one, counting refusals.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "common/error.h"

namespace moerl::zmq {

// Binds the handler's socket in `ctx` (before any CURVE server socket binds, so no handshake
// finds it missing) and returns the loop to run on its own thread: it serves until `stop` is
// set (checked every 100 ms) and closes its socket.
result<std::function<void()>> bind_zap_handler(void* ctx, const std::string& allowed_client_z85,
                                               std::shared_ptr<std::atomic<uint64_t>> refused,
                                               std::shared_ptr<std::atomic<bool>> stop);

}  // namespace moerl::zmq
