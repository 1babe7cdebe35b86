// Binding a server socket the way every moerl server does: no linger (a closing node never
// waits on unsent replies), optional high-water marks, CURVE when the context has plane keys, then
// the bound endpoint read back (a "tcp://host:0" bind picks the port). Used by zmq/server_socket
// (reward and env servers) and weights/cache_server (the checkpoint caches).
#pragma once

#include <zmq.h>

#include <string>

#include "common/error.h"
#include "common/status_try.h"
#include "zmq/check.h"
#include "zmq/context.h"

namespace moerl::zmq {

// Returns the endpoint actually bound. A high-water mark of 0 keeps ZeroMQ's default.
inline result<std::string> bind_server_socket(const zmq_context& ctx, void* sock,
                                              const std::string& endpoint, int rcv_hwm,
                                              int snd_hwm) {
  auto bind = [&](std::string& bound) -> status {
    int linger = 0;
    ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger));
    if (rcv_hwm > 0) ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_RCVHWM, &rcv_hwm, sizeof rcv_hwm));
    if (snd_hwm > 0) ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_SNDHWM, &snd_hwm, sizeof snd_hwm));
    STATUS_TRY(ctx.secure_server(sock));  // CURVE when the cluster has plane keys
    ZMQ_CHECK(zmq_bind(sock, endpoint.c_str()));
    char buf[256];
    size_t len = sizeof buf;
    ZMQ_CHECK(zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, buf, &len));
    bound = std::string(buf);
    return ok_status();
  };
  std::string bound;
  if (auto st = bind(bound); !st) return st.err();
  return bound;
}

}  // namespace moerl::zmq
