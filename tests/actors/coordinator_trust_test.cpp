// The shard side of fencing: when a buffer node may serve trainers (coordinator_trust.h).
// Times are plain numbers: the logic takes `now` from its caller.
#include "actors/coordinator_trust.h"

#include <gtest/gtest.h>

using namespace moerl::actors;

TEST(coordinator_trust, nothing_is_trusted_before_an_accepted_registration) {
  coordinator_trust t(1000);
  EXPECT_FALSE(t.trusted(0));
  EXPECT_NE(t.why_not(0).find("registration"), std::string::npos);
  t.accepted(t.current_link(), 100);
  EXPECT_TRUE(t.trusted(100));
  EXPECT_TRUE(t.why_not(100).empty());
}

TEST(coordinator_trust, trust_runs_from_when_the_accepted_heartbeat_was_sent) {
  coordinator_trust t(1000);
  auto link = t.current_link();
  t.accepted(link, 100);
  EXPECT_TRUE(t.trusted(1099));
  EXPECT_FALSE(t.trusted(1100));  // the coordinator may count from its receipt, not the reply
  t.accepted(link, 900);          // a later heartbeat's answer, arriving late, renews it
  EXPECT_TRUE(t.trusted(1100));
  t.accepted(link, 500);  // an older one's answer after a newer one's does not shorten it
  EXPECT_TRUE(t.trusted(1899));
  EXPECT_FALSE(t.trusted(1900));
}

TEST(coordinator_trust, a_link_loss_ends_trust_and_answers_from_the_old_link_count_for_nothing) {
  coordinator_trust t(1000);
  auto old_link = t.current_link();
  t.accepted(old_link, 100);
  t.link_lost();
  EXPECT_FALSE(t.trusted(150));
  t.accepted(old_link, 140);  // a heartbeat answered before the loss, delivered after it
  EXPECT_FALSE(t.trusted(150));
  t.accepted(t.current_link(), 200);  // the re-join was accepted
  EXPECT_TRUE(t.trusted(250));
}

TEST(coordinator_trust, a_fenced_node_is_never_trusted_again) {
  coordinator_trust t(1000);
  t.accepted(t.current_link(), 100);
  t.fence("declared dead: no heartbeat for 4100 ms");
  EXPECT_TRUE(t.fenced());
  EXPECT_FALSE(t.trusted(150));
  t.accepted(t.current_link(), 200);
  EXPECT_FALSE(t.trusted(250));
  EXPECT_NE(t.why_not(250).find("no heartbeat"), std::string::npos);
}

TEST(coordinator_trust, the_bound_is_below_every_way_the_coordinator_declares_a_node_dead) {
  EXPECT_LT(trust_bound_ms(4000), kRejoinGraceMs);
  EXPECT_LT(trust_bound_ms(4000), 4000);
  EXPECT_LT(trust_bound_ms(600), 600);
  EXPECT_GE(trust_bound_ms(1), 1);
}
