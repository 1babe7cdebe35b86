#include "actors/console_client.h"

#include <zmq.h>

#include <memory>

#include "ledger/zmq_check.h"

namespace moerl::actors {

namespace {
struct zmq_ctx_deleter {
  void operator()(void* c) const { zmq_ctx_term(c); }
};
struct zmq_sock_deleter {
  void operator()(void* s) const { zmq_close(s); }
};
}  // namespace

result<messages::admin_reply> console_call(const std::string& address,
                                           const messages::admin_request& req, int timeout_ms) {
  std::unique_ptr<void, zmq_ctx_deleter> ctx(zmq_ctx_new());
  if (!ctx) return error(errc::io_error, "zmq_ctx_new failed");
  std::unique_ptr<void, zmq_sock_deleter> sock(zmq_socket(ctx.get(), ZMQ_REQ));
  if (!sock)
    return error(errc::io_error,
                 std::string("zmq_socket(REQ) failed: ") + zmq_strerror(zmq_errno()));
  auto call = [&]() -> result<std::string> {
    int linger = 0;
    ZMQ_CHECK(zmq_setsockopt(sock.get(), ZMQ_LINGER, &linger, sizeof linger));
    ZMQ_CHECK(zmq_connect(sock.get(), address.c_str()));
    auto bytes = messages::encode(req);
    ZMQ_CHECK(zmq_send(sock.get(), bytes.data(), bytes.size(), 0));
    zmq_pollitem_t item{sock.get(), 0, ZMQ_POLLIN, 0};
    int n = zmq_poll(&item, 1, timeout_ms);
    ZMQ_CHECK(n);
    if (n == 0)
      return error(errc::timeout, "no reply from the coordinator console at " + address +
                                      " within " + std::to_string(timeout_ms) + " ms");
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, sock.get(), 0) == -1) {
      int e = zmq_errno();
      zmq_msg_close(&msg);
      return ledger::detail::zmq_failure("zmq_msg_recv(REQ)", e, __FILE__, __LINE__);
    }
    std::string out(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    zmq_msg_close(&msg);
    return out;
  };
  auto raw = call();
  if (!raw) return raw.err();
  return messages::decode<messages::admin_reply>(*raw);
}

}  // namespace moerl::actors
