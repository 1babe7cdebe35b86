// peer_rate_limit (console/peer_rate_limit.h), on a stepped clock: a client past its rate is
// refused and counted while another client is not; tokens come back with time; the table of
// clients stays bounded however many addresses appear.
#include "console/peer_rate_limit.h"

#include <gtest/gtest.h>

namespace moerl::console {

TEST(peer_rate_limit, a_burst_past_twice_the_rate_is_refused_and_counted) {
  peer_rate_limit limit(10);
  int allowed = 0;
  for (int i = 0; i < 50; ++i) allowed += limit.allow("10.0.0.1", 1000);
  EXPECT_EQ(allowed, 20);  // the burst: 2 x rate
  EXPECT_EQ(limit.refused(), 30u);
  EXPECT_TRUE(limit.allow("10.0.0.2", 1000));   // another client keeps its share
  EXPECT_FALSE(limit.allow("10.0.0.1", 1050));  // half a token
  EXPECT_TRUE(limit.allow("10.0.0.1", 1100));   // one token after 100 ms at 10/s
}

TEST(peer_rate_limit, zero_means_no_limit) {
  peer_rate_limit limit(0);
  for (int i = 0; i < 10000; ++i) ASSERT_TRUE(limit.allow("10.0.0.1", 0));
  EXPECT_EQ(limit.refused(), 0u);
}

TEST(peer_rate_limit, many_addresses_cost_bounded_memory_and_share_one_bucket) {
  peer_rate_limit limit(1);
  for (size_t i = 0; i < 3 * peer_rate_limit::kMaxPeers; ++i)
    limit.allow("peer-" + std::to_string(i), 0);  // none idle: all at the same instant
  EXPECT_LE(limit.peers(), peer_rate_limit::kMaxPeers + 1);
  EXPECT_GT(limit.refused(), 0u);  // the overflow bucket ran dry
  // Later, the idle ones are forgotten and a new address gets its own bucket again.
  EXPECT_TRUE(limit.allow("late", 1000000));
  EXPECT_LE(limit.peers(), peer_rate_limit::kMaxPeers + 1);
}

}  // namespace moerl::console
