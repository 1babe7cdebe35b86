// CURVE on the ZeroMQ planes: keys derived from the cluster secret, a secured pair that talks,
// and peers without the cluster's keys that cannot (a plain client, a client whose key is not
// the cluster's: refused by the ZAP handler and counted). Plus the start-up rule: off loopback
// no node runs its planes plain.
#include <gtest/gtest.h>
#include <zmq.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/config.h"
#include "common/temp_dir.h"
#include "zmq/bind.h"
#include "zmq/plane_context.h"

namespace moerl::zmq {
namespace {

const std::string kSecret(48, 'a');
const std::string kOtherSecret(48, 'b');

struct socket_closer {
  void* s;
  ~socket_closer() {
    if (s) zmq_close(s);
  }
};

// A ROUTER bound on loopback through the servers' one path (bind_server_socket).
std::pair<void*, std::string> bind_router(const zmq_context& ctx) {
  void* s = zmq_socket(ctx.handle(), ZMQ_ROUTER);
  auto bound = bind_server_socket(ctx, s, "tcp://127.0.0.1:*", 0, 0);
  EXPECT_TRUE(bound) << bound.err().to_string();
  return {s, bound ? *bound : ""};
}

// Sends one message from a DEALER made with `client` (secured by it) and reports whether the
// ROUTER got it within `wait_ms`.
bool delivered(const zmq_context& client, void* router, const std::string& endpoint, int wait_ms) {
  socket_closer d{zmq_socket(client.handle(), ZMQ_DEALER)};
  const int linger = 0;
  zmq_setsockopt(d.s, ZMQ_LINGER, &linger, sizeof linger);
  EXPECT_TRUE(client.secure_client(d.s));
  EXPECT_EQ(zmq_connect(d.s, endpoint.c_str()), 0);
  zmq_send(d.s, "hello", 5, ZMQ_DONTWAIT);  // queued until a handshake completes, if ever
  zmq_pollitem_t item{router, 0, ZMQ_POLLIN, 0};
  if (zmq_poll(&item, 1, wait_ms) <= 0) return false;
  char id[256], body[16];
  zmq_recv(router, id, sizeof id, 0);
  const int n = zmq_recv(router, body, sizeof body, 0);
  return n == 5 && std::string(body, 5) == "hello";
}

TEST(plane_keys, are_derived_from_the_secret_and_differ_between_clusters_and_roles) {
  auto a = derive_plane_keys(kSecret);
  auto again = derive_plane_keys(kSecret + "\n");  // a file's trailing newline is not secret
  auto b = derive_plane_keys(kOtherSecret);
  ASSERT_TRUE(a && again && b);
  EXPECT_EQ(a->server_public.size(), 40u);
  EXPECT_EQ(a->server_secret, again->server_secret);
  EXPECT_EQ(a->client_public, again->client_public);
  EXPECT_NE(a->server_public, a->client_public);
  EXPECT_NE(a->server_public, b->server_public);
  EXPECT_NE(a->client_secret, b->client_secret);
}

TEST(plane_keys, a_short_secret_or_a_missing_file_is_refused_by_name) {
  auto short_one = derive_plane_keys(std::string(31, 'x'));
  ASSERT_FALSE(short_one);
  EXPECT_NE(short_one.err().message.find("at least 32"), std::string::npos)
      << short_one.err().message;
  auto missing = load_plane_keys("/nonexistent/plane.secret");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.err().message.find("node.plane_secret_file /nonexistent/plane.secret"),
            std::string::npos)
      << missing.err().message;
}

TEST(plane_keys, a_new_secret_file_is_private_and_never_overwritten) {
  auto dir = temp_dir::create("plane-secret");
  ASSERT_TRUE(dir);
  const std::string path = (*dir)->path() + "/plane.secret";
  ASSERT_TRUE(write_new_plane_secret(path));
  EXPECT_EQ(std::filesystem::status(path).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  EXPECT_TRUE(load_plane_keys(path));
  EXPECT_FALSE(write_new_plane_secret(path));
}

TEST(plane_security, a_secured_client_and_server_of_one_cluster_talk) {
  auto server = zmq_context::create(*derive_plane_keys(kSecret));
  auto client = zmq_context::create(*derive_plane_keys(kSecret));
  ASSERT_TRUE(server && client);
  auto [router, ep] = bind_router(**server);
  socket_closer r{router};
  EXPECT_TRUE(delivered(**client, router, ep, 5000));
  EXPECT_EQ((*server)->num_refused_handshakes(), 0u);
}

TEST(plane_security, a_plain_client_reaches_nothing) {
  auto server = zmq_context::create(*derive_plane_keys(kSecret));
  auto plain = zmq_context::create();
  ASSERT_TRUE(server && plain);
  auto [router, ep] = bind_router(**server);
  socket_closer r{router};
  EXPECT_FALSE(delivered(**plain, router, ep, 1000));
}

TEST(plane_security, a_client_key_that_is_not_the_clusters_is_refused_and_counted) {
  auto server = zmq_context::create(*derive_plane_keys(kSecret));
  // Knows the server's public key (it is no secret) but holds another cluster's client key.
  auto forged = *derive_plane_keys(kOtherSecret);
  forged.server_public = derive_plane_keys(kSecret)->server_public;
  auto intruder = zmq_context::create(forged);
  ASSERT_TRUE(server && intruder);
  auto [router, ep] = bind_router(**server);
  socket_closer r{router};
  EXPECT_FALSE(delivered(**intruder, router, ep, 1000));
  for (int i = 0; i < 100 && (*server)->num_refused_handshakes() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_GE((*server)->num_refused_handshakes(), 1u);
}

TEST(plane_context, off_loopback_a_node_without_the_secret_does_not_start) {
  auto cfg = config::defaults();
  ASSERT_TRUE(cfg.set("node.host", "0.0.0.0", "test"));
  auto refused = make_plane_context(cfg);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.err().code, errc::invalid_config);
  EXPECT_NE(refused.err().message.find("node.plane_secret_file is not set"), std::string::npos)
      << refused.err().message;

  auto plain = make_plane_context(config::defaults());  // loopback: may stay plain
  ASSERT_TRUE(plain);
  EXPECT_FALSE((*plain)->encrypted());

  auto dir = temp_dir::create("plane-secret");
  ASSERT_TRUE(dir);
  const std::string path = (*dir)->path() + "/plane.secret";
  ASSERT_TRUE(write_new_plane_secret(path));
  ASSERT_TRUE(cfg.set("node.plane_secret_file", path, "test"));
  auto secured = make_plane_context(cfg);
  ASSERT_TRUE(secured) << secured.err().to_string();
  EXPECT_TRUE((*secured)->encrypted());
}

TEST(plane_context, the_admin_plane_follows_the_same_rule_on_its_endpoints_host) {
  auto cfg = config::defaults();
  auto loopback = admin_plane_keys(cfg, "tcp://127.0.0.1:7411");
  ASSERT_TRUE(loopback);
  EXPECT_FALSE(loopback->has_value());
  auto open = admin_plane_keys(cfg, "tcp://0.0.0.0:7410");
  ASSERT_FALSE(open);
  EXPECT_NE(open.err().message.find("tcp://0.0.0.0:7410"), std::string::npos) << open.err().message;
  EXPECT_NE(open.err().message.find("node.plane_secret_file is not set"), std::string::npos);

  auto dir = temp_dir::create("plane-secret");
  ASSERT_TRUE(dir);
  const std::string path = (*dir)->path() + "/plane.secret";
  ASSERT_TRUE(write_new_plane_secret(path));
  ASSERT_TRUE(cfg.set("node.plane_secret_file", path, "test"));
  // With a secret, loopback too: a client on 127.0.0.1 and a server on 0.0.0.0 must agree.
  for (const char* ep : {"tcp://127.0.0.1:7411", "tcp://10.0.0.5:7410"}) {
    auto keys = admin_plane_keys(cfg, ep);
    ASSERT_TRUE(keys) << keys.err().to_string();
    EXPECT_TRUE(keys->has_value()) << ep;
  }
}

}  // namespace
}  // namespace moerl::zmq
