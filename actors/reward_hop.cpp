#include "actors/reward_hop.h"

#include <zmq.h>

// The sample plane's checking macro: one macro for the ZeroMQ domain, shared with ledger/.
#include "ledger/zmq_check.h"

namespace moerl::actors {

result<std::unique_ptr<reward_push>> reward_push::connect(std::shared_ptr<ledger::zmq_context> ctx,
                                                          const std::vector<std::string>& endpoints,
                                                          int send_timeout_ms) {
  std::unique_ptr<reward_push> p(new reward_push);
  p->ctx_ = std::move(ctx);
  p->sock_ = zmq_socket(p->ctx_->handle(), ZMQ_PUSH);
  if (!p->sock_)
    return error(errc::io_error,
                 std::string("zmq_socket(PUSH) failed: ") + zmq_strerror(zmq_errno()));
  auto init = [&]() -> status {
    int linger = 0, hwm = 256;
    ZMQ_CHECK(zmq_setsockopt(p->sock_, ZMQ_LINGER, &linger, sizeof linger));
    ZMQ_CHECK(zmq_setsockopt(p->sock_, ZMQ_SNDHWM, &hwm, sizeof hwm));
    ZMQ_CHECK(zmq_setsockopt(p->sock_, ZMQ_SNDTIMEO, &send_timeout_ms, sizeof send_timeout_ms));
    for (auto& e : endpoints) ZMQ_CHECK(zmq_connect(p->sock_, e.c_str()));
    return ok_status();
  };
  if (auto st = init(); !st) return st.err();
  return p;
}

reward_push::~reward_push() {
  if (sock_) zmq_close(sock_);
}

status reward_push::send(const std::string& shard_endpoint, const std::string& sample_bytes) {
  ZMQ_CHECK(zmq_send(sock_, shard_endpoint.data(), shard_endpoint.size(), ZMQ_SNDMORE));
  ZMQ_CHECK(zmq_send(sock_, sample_bytes.data(), sample_bytes.size(), 0));
  return ok_status();
}

result<std::unique_ptr<reward_pull>> reward_pull::bind(std::shared_ptr<ledger::zmq_context> ctx,
                                                       const std::string& endpoint) {
  std::unique_ptr<reward_pull> p(new reward_pull);
  p->ctx_ = std::move(ctx);
  p->sock_ = zmq_socket(p->ctx_->handle(), ZMQ_PULL);
  if (!p->sock_)
    return error(errc::io_error,
                 std::string("zmq_socket(PULL) failed: ") + zmq_strerror(zmq_errno()));
  auto init = [&]() -> status {
    int linger = 0, hwm = 256;
    ZMQ_CHECK(zmq_setsockopt(p->sock_, ZMQ_LINGER, &linger, sizeof linger));
    ZMQ_CHECK(zmq_setsockopt(p->sock_, ZMQ_RCVHWM, &hwm, sizeof hwm));
    ZMQ_CHECK(zmq_bind(p->sock_, endpoint.c_str()));
    char buf[256];
    size_t len = sizeof buf;
    ZMQ_CHECK(zmq_getsockopt(p->sock_, ZMQ_LAST_ENDPOINT, buf, &len));
    p->endpoint_ = std::string(buf);
    return ok_status();
  };
  if (auto st = init(); !st) return st.err();
  return p;
}

reward_pull::~reward_pull() {
  if (sock_) zmq_close(sock_);
}

result<std::optional<std::pair<std::string, std::string>>> reward_pull::poll(int timeout_ms) {
  zmq_pollitem_t item{sock_, 0, ZMQ_POLLIN, 0};
  int n = zmq_poll(&item, 1, timeout_ms);
  ZMQ_CHECK(n);
  if (n == 0) return std::optional<std::pair<std::string, std::string>>();
  std::vector<std::string> parts;
  for (;;) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, sock_, ZMQ_DONTWAIT) == -1) {
      int e = zmq_errno();
      zmq_msg_close(&msg);
      return ledger::detail::zmq_failure("zmq_msg_recv(PULL)", e, __FILE__, __LINE__);
    }
    parts.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    bool more = zmq_msg_more(&msg);
    zmq_msg_close(&msg);
    if (!more) break;
  }
  if (parts.size() != 2) {
    ++bad_frames_;
    return std::optional<std::pair<std::string, std::string>>();
  }
  return std::optional<std::pair<std::string, std::string>>(std::make_pair(parts[0], parts[1]));
}

}  // namespace moerl::actors
