#include "zmq/server_socket.h"

#include <zmq.h>

#include <vector>

// The sample plane's checking macro: one macro for the ZeroMQ domain, shared with ledger/.
#include "zmq/bind.h"
#include "zmq/check.h"
#include "zmq/parts.h"

namespace moerl::zmq {

result<std::unique_ptr<zmq_server_socket>> zmq_server_socket::bind(
    std::shared_ptr<zmq::zmq_context> ctx, int type, const char* type_name,
    const std::string& endpoint, int rcv_hwm, int snd_hwm) {
  std::unique_ptr<zmq_server_socket> s(new zmq_server_socket);
  s->ctx_ = std::move(ctx);
  s->type_name_ = type_name;
  s->sock_ = zmq_socket(s->ctx_->handle(), type);
  if (!s->sock_)
    return error(errc::io_error,
                 std::string("zmq_socket(") + type_name + ") failed: " + zmq_strerror(zmq_errno()));
  auto bound = zmq::bind_server_socket(*s->ctx_, s->sock_, endpoint, rcv_hwm, snd_hwm);
  if (!bound) return bound.err();
  s->endpoint_ = *bound;
  return s;
}

zmq_server_socket::~zmq_server_socket() {
  if (sock_) zmq_close(sock_);
}

result<std::optional<std::vector<std::string>>> zmq_server_socket::poll_parts(int timeout_ms,
                                                                              size_t min_parts,
                                                                              size_t max_parts) {
  using out_t = std::optional<std::vector<std::string>>;
  zmq_pollitem_t item{sock_, 0, ZMQ_POLLIN, 0};
  const int n = zmq_poll(&item, 1, timeout_ms);
  ZMQ_CHECK(n);
  if (n == 0) return out_t();
  auto received = zmq::recv_message_parts(sock_, "zmq_msg_recv(" + type_name_ + ")");
  if (!received) return received.err();
  if (received->size() < min_parts || received->size() > max_parts) {
    ++num_bad_frames_;
    return out_t();
  }
  return out_t(std::move(*received));
}

result<std::optional<std::pair<std::string, std::string>>> zmq_server_socket::poll(int timeout_ms) {
  using out_t = std::optional<std::pair<std::string, std::string>>;
  auto parts = poll_parts(timeout_ms, 2, 2);
  if (!parts) return parts.err();
  if (!*parts) return out_t();
  return out_t(std::make_pair(std::move((**parts)[0]), std::move((**parts)[1])));
}

}  // namespace moerl::zmq
