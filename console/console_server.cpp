#include "console/console_server.h"

#include <zmq.h>

#include "common/log.h"
#include "common/status_try.h"
#include "messages/admin.h"
#include "zmq/check.h"

namespace moerl::console {

result<std::unique_ptr<console_server>> console_server::start(admin_caller_factory coordinator,
                                                              const std::string& address,
                                                              int request_timeout_ms,
                                                              std::optional<zmq::plane_keys> keys) {
  std::unique_ptr<console_server> s(new console_server);
  s->coordinator_ = std::move(coordinator);
  s->timeout_ms_ = request_timeout_ms;
  ASSIGN_OR_RETURN(s->zctx_, zmq::zmq_context::create(std::move(keys)));
  s->sock_ = zmq_socket(s->zctx_->handle(), ZMQ_REP);
  if (!s->sock_)
    return error(errc::io_error, std::string("zmq_socket(REP): ") + zmq_strerror(zmq_errno()));
  auto init = [&]() -> status {
    int linger = 0;
    ZMQ_CHECK(zmq_setsockopt(s->sock_, ZMQ_LINGER, &linger, sizeof linger));
    STATUS_TRY(s->zctx_->secure_server(s->sock_));
    // An admin request is a token, a verb and a few arguments: a peer announcing a larger
    // message is disconnected before it is buffered (after secure_server, which sets the
    // planes' larger node.max_frame_bytes).
    const int64_t max_request_bytes = 1 << 20;
    ZMQ_CHECK(
        zmq_setsockopt(s->sock_, ZMQ_MAXMSGSIZE, &max_request_bytes, sizeof max_request_bytes));
    ZMQ_CHECK(zmq_bind(s->sock_, address.c_str()));
    char buf[256];
    size_t len = sizeof buf;
    ZMQ_CHECK(zmq_getsockopt(s->sock_, ZMQ_LAST_ENDPOINT, buf, &len));
    s->address_ = buf;
    return ok_status();
  };
  if (auto st = init(); !st)
    return error(st.err().code, "console cannot listen on " + address + ": " + st.err().message);
  s->thread_ = std::thread([p = s.get()] { p->serve(); });
  return s;
}

console_server::~console_server() {
  stop();
  if (sock_) zmq_close(sock_);  // before the context goes (its destructor terminates it)
}

void console_server::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void console_server::serve() {
  auto log = logger("console");
  const admin_caller ask = coordinator_();
  while (!stop_) {
    zmq_pollitem_t item{sock_, 0, ZMQ_POLLIN, 0};
    int n = zmq_poll(&item, 1, 200);
    if (n <= 0) continue;
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, sock_, 0) == -1) {
      zmq_msg_close(&msg);
      continue;
    }
    std::string req(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    zmq_msg_close(&msg);
    std::string reply;
    auto decoded = messages::decode<messages::admin_request>(req);
    if (!decoded) {
      messages::admin_reply r;
      r.err = moerl::error(decoded.err().code, "console request: " + decoded.err().message);
      reply = messages::encode(r);
    } else {
      reply = ask(req, decoded->request_id, timeout_ms_);
    }
    if (zmq_send(sock_, reply.data(), reply.size(), 0) == -1)
      log->warn("console reply not sent: {}", zmq_strerror(zmq_errno()));
  }
}

}  // namespace moerl::console
