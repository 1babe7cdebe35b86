// The buffer shard alone: staging until commit, fencing, duplicates, staleness, whole
// groups served exactly once, bounded capacity.
#include <gtest/gtest.h>

#include <algorithm>

#include "ledger/buffer_shard.h"

namespace moerl::ledger {
namespace {

constexpr uint32_t kG = 3;  // group size

messages::sample make(unit_id u, attempt_t a, uint32_t seq, group_id g, uint32_t idx,
                      uint64_t version = 5) {
  messages::sample s;
  s.work_unit = u;
  s.attempt = a;
  s.seq = seq;
  s.group_id = g;
  s.index_in_group = idx;
  s.policy_version = version;
  s.tokens = {seq, idx, uint32_t(g)};
  s.logprobs = {-0.5f, -0.25f, -1.0f};
  s.worker = "w";
  return s;
}

ledger_event opened(unit_id u, attempt_t a, std::vector<group_id> groups) {
  return {ledger_event::kind::attempt_opened, "s0", u, a, std::move(groups), kG};
}
ledger_event fenced(unit_id u, attempt_t a) {
  return {ledger_event::kind::attempt_fenced, "s0", u, a, {}, 0};
}
ledger_event committed(unit_id u, attempt_t a) {
  return {ledger_event::kind::unit_committed, "s0", u, a, {}, 0};
}

// Sends every sample of (u, a) for `groups`, in seq order.
void send_all(buffer_shard& sh, unit_id u, attempt_t a, const std::vector<group_id>& groups,
              uint64_t version = 5) {
  uint32_t seq = 0;
  for (group_id g : groups)
    for (uint32_t i = 0; i < kG; ++i) (void)sh.admit(make(u, a, seq++, g, i, version));
}

class buffer_shard_test : public ::testing::Test {
 protected:
  shard_options opts() {
    shard_options o;
    o.name = "s0";
    o.group_size = kG;
    o.capacity_samples = 30;
    o.max_staleness = 1;
    return o;
  }
  buffer_shard sh{opts()};
};

TEST_F(buffer_shard_test, samples_are_staged_until_commit_then_served_as_whole_groups_once) {
  sh.apply(opened(1, 7, {10, 11}));
  send_all(sh, 1, 7, {10, 11});
  auto acks = sh.take_acks();
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].accepted_groups, (std::vector<group_id>{10, 11}));
  EXPECT_TRUE(acks[0].stale_groups.empty());
  EXPECT_TRUE(sh.serve(10).consumed.empty()) << "nothing is servable before the commit";
  sh.apply(committed(1, 7));
  auto b1 = sh.serve(1);
  ASSERT_EQ(b1.consumed.size(), 1u);
  ASSERT_EQ(b1.batch.samples.size(), kG);
  for (uint32_t i = 0; i < kG; ++i) {
    EXPECT_EQ(b1.batch.samples[i].group_id, b1.consumed[0].group);
    EXPECT_EQ(b1.batch.samples[i].index_in_group, i);
  }
  auto b2 = sh.serve(5);
  ASSERT_EQ(b2.consumed.size(), 1u);
  EXPECT_NE(b2.consumed[0].group, b1.consumed[0].group);
  EXPECT_NE(b2.batch.batch_id, b1.batch.batch_id);
  EXPECT_TRUE(sh.serve(5).consumed.empty());
  EXPECT_EQ(sh.stats().resident_samples, 0u);
  // A re-sent commit (coordinator restart) serves nothing twice.
  sh.apply(committed(1, 7));
  EXPECT_TRUE(sh.serve(5).consumed.empty());
}

TEST_F(buffer_shard_test, samples_arriving_before_the_lease_event_are_acked_once_it_arrives) {
  send_all(sh, 4, 2, {1});
  EXPECT_TRUE(sh.take_acks().empty());
  sh.apply(opened(4, 2, {1}));
  EXPECT_EQ(sh.take_acks().size(), 1u);
}

TEST_F(buffer_shard_test, late_samples_of_a_fenced_attempt_are_dropped_and_counted) {
  sh.apply(opened(1, 1, {10}));
  ASSERT_TRUE(sh.admit(make(1, 1, 0, 10, 0)).ok());
  sh.apply(fenced(1, 1));
  EXPECT_EQ(sh.stats().purged, 1u);
  EXPECT_EQ(sh.stats().resident_samples, 0u);
  auto late = sh.admit(make(1, 1, 1, 10, 1));
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.err().code, errc::stale_attempt);
  // The new attempt goes through; the old one stays fenced after it.
  sh.apply(opened(1, 2, {10}));
  send_all(sh, 1, 2, {10});
  EXPECT_EQ(sh.take_acks().size(), 1u);
  EXPECT_EQ(sh.admit(make(1, 1, 2, 10, 2)).err().code, errc::stale_attempt);
  EXPECT_EQ(sh.stats().fenced, 2u);
}

TEST_F(buffer_shard_test, a_sample_of_a_newer_attempt_fences_the_staged_older_one) {
  ASSERT_TRUE(sh.admit(make(3, 1, 0, 10, 0)).ok());
  ASSERT_TRUE(sh.admit(make(3, 2, 0, 10, 0)).ok());
  EXPECT_EQ(sh.stats().purged, 1u);
  EXPECT_EQ(sh.admit(make(3, 1, 1, 10, 1)).err().code, errc::stale_attempt);
  // The lease event of the older attempt arriving late is ignored.
  sh.apply(opened(3, 1, {10}));
  EXPECT_TRUE(sh.take_acks().empty());
}

TEST_F(buffer_shard_test, replayed_duplicates_are_dropped_before_and_after_commit) {
  sh.apply(opened(1, 1, {10}));
  ASSERT_TRUE(sh.admit(make(1, 1, 0, 10, 0)).ok());
  EXPECT_EQ(sh.admit(make(1, 1, 0, 10, 0)).err().code, errc::duplicate);  // same seq
  EXPECT_EQ(sh.admit(make(1, 1, 1, 10, 0)).err().code, errc::duplicate);  // same group slot
  ASSERT_TRUE(sh.admit(make(1, 1, 1, 10, 1)).ok());
  ASSERT_TRUE(sh.admit(make(1, 1, 2, 10, 2)).ok());
  ASSERT_EQ(sh.take_acks().size(), 1u);
  sh.apply(committed(1, 1));
  // The whole attempt replayed after the commit
  for (uint32_t i = 0; i < kG; ++i)
    EXPECT_EQ(sh.admit(make(1, 1, i, 10, i)).err().code, errc::duplicate);
  EXPECT_EQ(sh.stats().duplicate, 5u);
  auto b = sh.serve(10);
  EXPECT_EQ(b.batch.samples.size(), kG);
  EXPECT_TRUE(sh.take_acks().empty()) << "no second ack";
}

TEST_F(buffer_shard_test, stale_samples_drop_their_whole_group_with_a_reason) {
  sh.set_policy_version(10);
  sh.apply(opened(1, 1, {10, 11}));
  uint32_t seq = 0;
  for (uint32_t i = 0; i < kG; ++i) ASSERT_TRUE(sh.admit(make(1, 1, seq++, 10, i, 9)).ok());
  ASSERT_TRUE(sh.admit(make(1, 1, seq++, 11, 0, 9)).ok());
  auto st = sh.admit(make(1, 1, seq++, 11, 1, 8));  // 8 + 1 < 10
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.err().code, errc::stale_policy);
  ASSERT_TRUE(sh.admit(make(1, 1, seq++, 11, 2, 9)).ok());
  auto acks = sh.take_acks();
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].accepted_groups, (std::vector<group_id>{10}));
  EXPECT_EQ(acks[0].stale_groups, (std::vector<group_id>{11}));
  EXPECT_EQ(sh.stats().stale_policy, 1u);
  EXPECT_EQ(sh.stats().resident_samples, kG) << "the stale group's samples are freed";
  sh.apply(committed(1, 1));
  auto b = sh.serve(10);
  ASSERT_EQ(b.consumed.size(), 1u);
  EXPECT_EQ(b.consumed[0].group, 10u);
}

TEST_F(buffer_shard_test, samples_outside_the_lease_are_refused) {
  sh.apply(opened(1, 1, {10}));
  EXPECT_EQ(sh.admit(make(1, 1, 0, 99, 0)).err().code, errc::invalid_argument);
  EXPECT_EQ(sh.admit(make(1, 1, 0, 10, kG)).err().code, errc::invalid_argument);
  EXPECT_EQ(sh.admit(make(1, 1, kG, 10, 0)).err().code, errc::invalid_argument);
  // Arrived before the lease event, then found outside it: purged at open.
  ASSERT_TRUE(sh.admit(make(2, 1, 0, 77, 0)).ok());
  sh.apply(opened(2, 1, {20}));
  EXPECT_EQ(sh.stats().resident_samples, 0u);
  EXPECT_EQ(sh.stats().invalid, 4u);
}

TEST_F(buffer_shard_test, capacity_bounds_resident_samples_and_frees_on_serve) {
  shard_options o = opts();
  o.capacity_samples = 2 * kG;
  buffer_shard small(o);
  small.apply(ledger_event{ledger_event::kind::attempt_opened, "s0", 1, 1, {10, 11}, kG});
  send_all(small, 1, 1, {10, 11});
  EXPECT_EQ(small.free_samples(), 0u);
  small.apply(ledger_event{ledger_event::kind::attempt_opened, "s0", 2, 1, {20}, kG});
  auto full = small.admit(make(2, 1, 0, 20, 0));
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.err().code, errc::capacity_exceeded);
  small.apply(ledger_event{ledger_event::kind::unit_committed, "s0", 1, 1, {}, 0});
  ASSERT_EQ(small.serve(1).consumed.size(), 1u);
  EXPECT_EQ(small.free_samples(), kG);
  EXPECT_TRUE(small.admit(make(2, 1, 0, 20, 0)).ok()) << "a refused sample may be retried";
  EXPECT_EQ(small.stats().peak_samples, 2 * kG);
}

TEST_F(buffer_shard_test, events_for_other_shards_are_ignored) {
  sh.apply({ledger_event::kind::attempt_opened, "other", 1, 1, {10}, kG});
  send_all(sh, 1, 1, {10});
  EXPECT_TRUE(sh.take_acks().empty());
}

}  // namespace
}  // namespace moerl::ledger
