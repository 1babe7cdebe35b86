// Configuration reaches the fabric: fabric.* keys, the MOERL_FABRIC_PROVIDER override,
// and the selected provider as provenance reports it.
#include <gtest/gtest.h>

#include <cstdlib>

#include "common/config.h"
#include "fabric/collectives.h"
#include "fabric/ep_group.h"
#include "fabric/transport.h"

namespace moerl::fabric {
namespace {

TEST(fabric_options, config_keys_set_provider_shim_and_timeouts) {
  ::unsetenv("MOERL_FABRIC_PROVIDER");
  auto cfg = config::load("", {"fabric.provider=tcp", "fabric.require_provider=true",
                               "fabric.reorder_shim=true", "fabric.op_timeout_ms=1234"});
  ASSERT_TRUE(cfg.ok()) << cfg.err().to_string();
  const transport_options o = transport_options::from_config(*cfg);
  EXPECT_EQ(o.provider, "tcp");
  EXPECT_TRUE(o.require_provider);
  EXPECT_TRUE(o.reorder_shim);
  ep_config ep;
  apply_config(*cfg, ep);
  EXPECT_EQ(ep.op_timeout_ms, 1234);
  collective_config cc;
  apply_config(*cfg, cc);
  EXPECT_EQ(cc.op_timeout_ms, 1234);
}

TEST(fabric_options, the_environment_overrides_the_configured_provider) {
  auto cfg = config::load("", {"fabric.provider=tcp"});
  ASSERT_TRUE(cfg.ok());
  ::setenv("MOERL_FABRIC_PROVIDER", "shm", 1);
  const transport_options o = transport_options::from_config(*cfg);
  ::unsetenv("MOERL_FABRIC_PROVIDER");
  EXPECT_EQ(o.provider, "shm");
}

TEST(fabric_options, probing_reports_the_provider_that_would_be_used) {
  transport_options o;
  o.provider = "tcp";
  o.require_provider = true;
  auto d = probe_transport(o);
  ASSERT_TRUE(d.ok()) << d.err().to_string();
  EXPECT_EQ(d->provider, "tcp;ofi_rxm");
  EXPECT_GE(d->cq_data_size, 4u);
  EXPECT_FALSE(d->libfabric_version.empty());
  // auto prefers efa, then shm: never tcp while shm exists.
  o.provider = "auto";
  o.require_provider = false;
  auto a = probe_transport(o);
  ASSERT_TRUE(a.ok()) << a.err().to_string();
  EXPECT_TRUE(a->provider == "efa" || a->provider == "shm") << a->provider;
}

TEST(fabric_options, a_missing_provider_falls_back_unless_required) {
  transport_options o;
  o.provider = "efa";
  auto d = probe_transport(o);
  ASSERT_TRUE(d.ok()) << d.err().to_string();
  EXPECT_NE(d->provider, "efa");
  o.require_provider = true;
  auto r = probe_transport(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::provider_unavailable);
}

}  // namespace
}  // namespace moerl::fabric
