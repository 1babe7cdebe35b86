#include "zmq/context.h"

#include <zmq.h>

#include "common/status_try.h"
#include "zmq/check.h"
#include "zmq/frame_limit.h"
#include "zmq/zap_handler.h"

namespace moerl::zmq {

namespace {
std::atomic<int64_t> g_max_frame_bytes{0};
}

void set_max_frame_bytes(int64_t bytes) { g_max_frame_bytes = bytes; }
int64_t max_frame_bytes() { return g_max_frame_bytes; }

result<std::shared_ptr<zmq_context>> zmq_context::create(std::optional<plane_keys> keys) {
  void* ctx = zmq_ctx_new();
  if (!ctx) return detail::zmq_failure("zmq_ctx_new()", zmq_errno(), __FILE__, __LINE__);
  return std::shared_ptr<zmq_context>(new zmq_context(ctx, std::move(keys)));
}

zmq_context::~zmq_context() {
  stop_->store(true);
  if (zap_.joinable()) zap_.join();  // closes the handler's socket, which ctx_term waits for
  // The connection limiter's thread closes its sockets when ctx_term wakes it (ETERM), and is
  // joined after: it must read every monitor for as long as the monitored sockets live.
  zmq_ctx_term(ctx_);
  limiter_.reset();
}

uint64_t zmq_context::num_refused_connections() const {
  std::lock_guard<std::mutex> lock(limiter_mu_);
  return limiter_ ? limiter_->num_refused() : 0;
}

status zmq_context::secure_server(void* sock) const {
  if (const int64_t limit = max_frame_bytes(); limit > 0)
    ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &limit, sizeof limit));
  if (const int64_t per_peer = max_connections_per_peer(); per_peer > 0) {
    std::lock_guard<std::mutex> lock(limiter_mu_);
    if (!limiter_) limiter_ = std::make_unique<connection_limiter>(ctx_);
    STATUS_TRY(limiter_->watch(sock, per_peer));
  }
  if (!keys_) return ok_status();
  {
    std::lock_guard<std::mutex> lock(zap_mu_);
    if (!zap_.joinable() && !zap_failure_) {
      auto loop = bind_zap_handler(ctx_, keys_->client_public, refused_, stop_);
      if (loop)
        zap_ = std::thread(std::move(*loop));
      else
        zap_failure_ = loop.err();
    }
    if (zap_failure_) return *zap_failure_;
  }
  const int on = 1;
  ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &on, sizeof on));
  ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, keys_->server_secret.c_str(), 40));
  // A domain makes libzmq ask the ZAP handler for every handshake (and refuse the connection
  // when no handler answers) instead of admitting any client that knows the server key.
  ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, "moerl", 5));
  return ok_status();
}

status zmq_context::secure_client(void* sock) const {
  if (!keys_) return ok_status();
  ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, keys_->server_public.c_str(), 40));
  ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, keys_->client_public.c_str(), 40));
  ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, keys_->client_secret.c_str(), 40));
  return ok_status();
}

}  // namespace moerl::zmq
