#include "env/env_server.h"

#include <zmq.h>

#include "zmq/check.h"

namespace moerl::env {

result<std::unique_ptr<env_server>> env_server::bind(std::shared_ptr<zmq::zmq_context> ctx,
                                                     const std::string& endpoint) {
  // The high-water marks bound what a flood of requests can queue on the node.
  auto sock = zmq::zmq_server_socket::bind(std::move(ctx), ZMQ_ROUTER, "ROUTER", endpoint,
                                           /*rcv_hwm=*/4096, /*snd_hwm=*/4096);
  if (!sock) return sock.err();
  return std::unique_ptr<env_server>(new env_server(std::move(*sock)));
}

status env_server::reply(const std::string& client, const std::string& bytes) {
  void* s = sock_->handle();
  ZMQ_CHECK(zmq_send(s, client.data(), client.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT));
  ZMQ_CHECK(zmq_send(s, bytes.data(), bytes.size(), ZMQ_DONTWAIT));
  return ok_status();
}

}  // namespace moerl::env
