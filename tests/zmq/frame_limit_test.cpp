// node.max_frame_bytes (zmq/frame_limit.h, applied by zmq_context::secure_server): a
// peer that sends a message over the limit is disconnected and the message never reaches the
// server; the server goes on taking messages within the limit, plain or under CURVE.
#include <gtest/gtest.h>
#include <zmq.h>

#include <string>

#include "zmq/bind.h"
#include "zmq/context.h"
#include "zmq/frame_limit.h"

namespace moerl::zmq {
namespace {

constexpr int64_t kLimit = 1024;

struct socket_closer {
  void* s;
  ~socket_closer() {
    if (s) zmq_close(s);
  }
};

// Sends `size` bytes from a fresh DEALER of `client` and reports whether the ROUTER got them
// within `wait_ms` (a bound: an oversized message never comes, a small one comes at once).
bool delivered(const zmq_context& client, void* router, const std::string& endpoint, size_t size,
               int wait_ms) {
  socket_closer d{zmq_socket(client.handle(), ZMQ_DEALER)};
  const int linger = 0;
  zmq_setsockopt(d.s, ZMQ_LINGER, &linger, sizeof linger);
  EXPECT_TRUE(client.secure_client(d.s));
  EXPECT_EQ(zmq_connect(d.s, endpoint.c_str()), 0);
  const std::string body(size, 'x');
  zmq_send(d.s, body.data(), body.size(), 0);
  zmq_pollitem_t item{router, 0, ZMQ_POLLIN, 0};
  if (zmq_poll(&item, 1, wait_ms) <= 0) return false;
  zmq_msg_t id, msg;
  zmq_msg_init(&id);
  zmq_msg_init(&msg);
  zmq_msg_recv(&id, router, 0);
  zmq_msg_recv(&msg, router, 0);
  const bool ok = zmq_msg_size(&msg) == size;
  zmq_msg_close(&id);
  zmq_msg_close(&msg);
  return ok;
}

void check_limit(std::optional<plane_keys> keys) {
  set_max_frame_bytes(kLimit);
  auto server = zmq_context::create(keys);
  auto client = zmq_context::create(keys);
  ASSERT_TRUE(server && client);
  socket_closer router{zmq_socket((*server)->handle(), ZMQ_ROUTER)};
  auto ep = bind_server_socket(**server, router.s, "tcp://127.0.0.1:*", 0, 0);
  ASSERT_TRUE(ep) << ep.err().to_string();
  // The limit is on the frame as it crosses the wire: CURVE's box adds some 40 bytes.
  EXPECT_TRUE(delivered(**client, router.s, *ep, kLimit - 64, 5000));
  EXPECT_FALSE(delivered(**client, router.s, *ep, 4 * kLimit, 1000));
  EXPECT_FALSE(delivered(**client, router.s, *ep, 1 << 20, 1000));
  // The refused peers cost the server nothing: the next one within the limit gets through.
  EXPECT_TRUE(delivered(**client, router.s, *ep, 16, 5000));
  set_max_frame_bytes(0);
}

TEST(frame_limit, a_plain_server_drops_larger_messages_and_keeps_serving) {
  check_limit(std::nullopt);
}

TEST(frame_limit, a_curve_server_drops_larger_messages_and_keeps_serving) {
  check_limit(*derive_plane_keys(std::string(48, 'a')));
}

}  // namespace
}  // namespace moerl::zmq
