#include "actors/env_server.h"

#include <zmq.h>

#include <vector>

#include "ledger/zmq_check.h"

namespace moerl::actors {

result<std::unique_ptr<env_server>> env_server::bind(std::shared_ptr<ledger::zmq_context> ctx,
                                                     const std::string& endpoint) {
  std::unique_ptr<env_server> s(new env_server);
  s->ctx_ = std::move(ctx);
  s->sock_ = zmq_socket(s->ctx_->handle(), ZMQ_ROUTER);
  if (!s->sock_)
    return error(errc::io_error,
                 std::string("zmq_socket(ROUTER) failed: ") + zmq_strerror(zmq_errno()));
  auto init = [&]() -> status {
    // The high-water marks bound what a flood of requests can queue on the node.
    int linger = 0, hwm = 4096;
    ZMQ_CHECK(zmq_setsockopt(s->sock_, ZMQ_LINGER, &linger, sizeof linger));
    ZMQ_CHECK(zmq_setsockopt(s->sock_, ZMQ_RCVHWM, &hwm, sizeof hwm));
    ZMQ_CHECK(zmq_setsockopt(s->sock_, ZMQ_SNDHWM, &hwm, sizeof hwm));
    ZMQ_CHECK(zmq_bind(s->sock_, endpoint.c_str()));
    char buf[256];
    size_t len = sizeof buf;
    ZMQ_CHECK(zmq_getsockopt(s->sock_, ZMQ_LAST_ENDPOINT, buf, &len));
    s->endpoint_ = std::string(buf);
    return ok_status();
  };
  if (auto st = init(); !st) return st.err();
  return s;
}

env_server::~env_server() {
  if (sock_) zmq_close(sock_);
}

result<std::optional<std::pair<std::string, std::string>>> env_server::poll(int timeout_ms) {
  using out_t = std::optional<std::pair<std::string, std::string>>;
  zmq_pollitem_t item{sock_, 0, ZMQ_POLLIN, 0};
  const int n = zmq_poll(&item, 1, timeout_ms);
  ZMQ_CHECK(n);
  if (n == 0) return out_t();
  std::vector<std::string> parts;
  for (bool more = true; more;) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, sock_, ZMQ_DONTWAIT) == -1) {
      const int e = zmq_errno();
      zmq_msg_close(&msg);
      return ledger::detail::zmq_failure("zmq_msg_recv(ROUTER)", e, __FILE__, __LINE__);
    }
    parts.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    more = zmq_msg_more(&msg);
    zmq_msg_close(&msg);
  }
  if (parts.size() != 2) {
    ++num_bad_frames_;
    return out_t();
  }
  return out_t(std::make_pair(std::move(parts[0]), std::move(parts[1])));
}

status env_server::reply(const std::string& client, const std::string& bytes) {
  ZMQ_CHECK(zmq_send(sock_, client.data(), client.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT));
  ZMQ_CHECK(zmq_send(sock_, bytes.data(), bytes.size(), ZMQ_DONTWAIT));
  return ok_status();
}

}  // namespace moerl::actors
