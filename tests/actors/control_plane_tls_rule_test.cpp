// The control plane's TLS rule (actors/caf_setup.cpp, common/loopback.h) and `moerl ca init`
// (actors/cluster_ca.h): off loopback a node without the CA files does not start and the error
// names the missing key; on loopback it may stay plain; the files ca init writes are accepted
// and its node certificate verifies against its CA; an existing directory is never written.
#include <gtest/gtest.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <cstdio>
#include <filesystem>

#include "actors/caf_setup.h"
#include "actors/cluster_ca.h"
#include "common/config.h"
#include "common/loopback.h"
#include "common/temp_dir.h"

namespace moerl::actors {
namespace {

X509* read_cert(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return nullptr;
  X509* c = PEM_read_X509(f, nullptr, nullptr, nullptr);
  std::fclose(f);
  return c;
}

TEST(control_plane_tls, off_loopback_without_the_files_a_node_does_not_start) {
  auto cfg = config::defaults();
  ASSERT_TRUE(cfg.set("node.host", "0.0.0.0", "test"));
  auto o = control_plane_options::from_config(cfg);
  ASSERT_FALSE(o);
  EXPECT_EQ(o.err().code, errc::invalid_config);
  EXPECT_NE(o.err().message.find("node.tls_certificate is not set"), std::string::npos)
      << o.err().message;
  EXPECT_NE(o.err().message.find("0.0.0.0 (not loopback)"), std::string::npos) << o.err().message;
  EXPECT_NE(o.err().message.find("moerl ca init"), std::string::npos) << o.err().message;
}

TEST(control_plane_tls, on_loopback_it_may_stay_plain) {
  auto cfg = config::defaults();
  auto o = control_plane_options::from_config(cfg);
  ASSERT_TRUE(o) << o.err().to_string();
  EXPECT_FALSE(o->tls);
  EXPECT_FALSE(control_plane_tls(cfg));
}

TEST(control_plane_tls, ca_init_files_are_taken_and_the_node_certificate_verifies) {
  auto tmp = temp_dir::create("cluster-ca");
  ASSERT_TRUE(tmp);
  const std::string dir = (*tmp)->path() + "/ca";
  ASSERT_TRUE(write_cluster_ca(dir, 2));
  for (const char* f : {"ca.key", "tls.key"})
    EXPECT_EQ(std::filesystem::status(dir + "/" + f).permissions() & std::filesystem::perms::all,
              std::filesystem::perms::owner_read | std::filesystem::perms::owner_write)
        << f;
  auto cfg = config::defaults();
  ASSERT_TRUE(cfg.set("node.host", "0.0.0.0", "test"));
  ASSERT_TRUE(cfg.set("node.tls_certificate", dir + "/tls.crt", "test"));
  ASSERT_TRUE(cfg.set("node.tls_key", dir + "/tls.key", "test"));
  // One file missing: named.
  auto partial = control_plane_options::from_config(cfg);
  ASSERT_FALSE(partial);
  EXPECT_NE(partial.err().message.find("node.tls_ca is not set"), std::string::npos)
      << partial.err().message;
  ASSERT_TRUE(cfg.set("node.tls_ca", dir + "/ca.crt", "test"));
  auto o = control_plane_options::from_config(cfg);
  ASSERT_TRUE(o) << o.err().to_string();
  EXPECT_TRUE(o->tls);

  X509* ca = read_cert(dir + "/ca.crt");
  X509* node = read_cert(dir + "/tls.crt");
  ASSERT_TRUE(ca && node);
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, ca);
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, node, nullptr);
  EXPECT_EQ(X509_verify_cert(ctx), 1)
      << X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx));
  // Another cluster's CA does not vouch for this node.
  ASSERT_TRUE(write_cluster_ca(dir + "-other", 2));
  X509* other = read_cert(dir + "-other/ca.crt");
  X509_STORE* other_store = X509_STORE_new();
  X509_STORE_add_cert(other_store, other);
  X509_STORE_CTX* other_ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(other_ctx, other_store, node, nullptr);
  EXPECT_NE(X509_verify_cert(other_ctx), 1);
  X509_STORE_CTX_free(other_ctx);
  X509_STORE_free(other_store);
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  X509_free(other);
  X509_free(ca);
  X509_free(node);

  auto again = write_cluster_ca(dir, 2);
  ASSERT_FALSE(again);
  EXPECT_NE(again.err().message.find("never overwritten"), std::string::npos)
      << again.err().message;
}

}  // namespace
}  // namespace moerl::actors
