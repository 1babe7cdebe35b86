// The ledger, shard and sample-plane options come from the `ledger` and `buffer` config
// sections; bad values are errors naming the key.
#include <gtest/gtest.h>

#include "ledger/sample_plane.h"
#include "ledger/work_ledger.h"

namespace moerl::ledger {
namespace {

TEST(ledger_config, defaults_come_from_the_schema) {
  auto cfg = config::defaults();
  auto lo = ledger_options::from_config(cfg);
  ASSERT_TRUE(lo.ok()) << lo.err().to_string();
  EXPECT_EQ(lo->lease_timeout_ms, 30000);
  EXPECT_EQ(lo->group_size, 8u);
  EXPECT_EQ(lo->max_groups_per_unit, 4u);
  EXPECT_EQ(lo->shard_capacity_samples, 4096u);
  EXPECT_EQ(lo->store_prefix, "ledger");
  auto so = shard_options::from_config(cfg, "buffer-0");
  ASSERT_TRUE(so.ok()) << so.err().to_string();
  EXPECT_EQ(so->name, "buffer-0");
  EXPECT_EQ(so->max_staleness, 1u);
  auto po = sample_plane_options::from_config(cfg);
  ASSERT_TRUE(po.ok());
  EXPECT_EQ(po->credits_per_producer, 64u);
}

TEST(ledger_config, out_of_range_values_are_refused_by_the_schema_naming_their_key) {
  // The ranges are the schema's (common/config_schema.cpp): a config never holds them.
  for (const char* ov : {"ledger.group_size=0", "buffer.credits_per_producer=0"}) {
    auto cfg = config::load("", {ov});
    ASSERT_FALSE(cfg.ok()) << ov;
    EXPECT_EQ(cfg.err().code, errc::invalid_config);
    EXPECT_NE(cfg.err().message.find(std::string(ov).substr(0, std::string(ov).find('='))),
              std::string::npos)
        << cfg.err().message;
  }
  // A rule between keys is load()'s; a shard still refuses a config built key by key.
  EXPECT_FALSE(config::load("", {"buffer.capacity_samples=3"}).ok());  // below one group of 8
  auto small = config::defaults();
  ASSERT_TRUE(small.set("buffer.capacity_samples", "3", "test").ok());
  auto so = shard_options::from_config(small, "b");
  ASSERT_FALSE(so.ok());
  EXPECT_NE(so.err().message.find("buffer.capacity_samples"), std::string::npos);

  auto prefix = config::load("", {"ledger.store_prefix=../x"});
  ASSERT_TRUE(prefix.ok());
  EXPECT_FALSE(ledger_options::from_config(*prefix).ok());
}

}  // namespace
}  // namespace moerl::ledger
