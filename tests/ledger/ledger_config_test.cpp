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

TEST(ledger_config, out_of_range_values_name_their_key) {
  auto cfg = config::load("", {"ledger.group_size=0"});
  ASSERT_TRUE(cfg.ok()) << cfg.err().to_string();
  auto lo = ledger_options::from_config(*cfg);
  ASSERT_FALSE(lo.ok());
  EXPECT_EQ(lo.err().code, errc::invalid_config);
  EXPECT_NE(lo.err().message.find("ledger.group_size"), std::string::npos);

  auto small = config::load("", {"buffer.capacity_samples=3"});  // below one group of 8
  ASSERT_TRUE(small.ok());
  auto so = shard_options::from_config(*small, "b");
  ASSERT_FALSE(so.ok());
  EXPECT_NE(so.err().message.find("buffer.capacity_samples"), std::string::npos);

  auto credits = config::load("", {"buffer.credits_per_producer=0"});
  ASSERT_TRUE(credits.ok());
  auto po = sample_plane_options::from_config(*credits);
  ASSERT_FALSE(po.ok());
  EXPECT_NE(po.err().message.find("buffer.credits_per_producer"), std::string::npos);

  auto prefix = config::load("", {"ledger.store_prefix=../x"});
  ASSERT_TRUE(prefix.ok());
  EXPECT_FALSE(ledger_options::from_config(*prefix).ok());
}

}  // namespace
}  // namespace moerl::ledger
