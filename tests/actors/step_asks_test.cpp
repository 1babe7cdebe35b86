// The trainer's asks to its buffer shards (actors/internal/step_asks.h): a step that wants N
// groups is asked for N in all, each shard for its share.
#include <gtest/gtest.h>

#include <random>

#include "actors/internal/step_asks.h"

namespace moerl::actors {
namespace {

const std::vector<std::string> kTwo{"a", "b"};

TEST(step_asks, splits_a_step_evenly_and_asks_again_for_the_next_step) {
  step_asks asks(8);
  EXPECT_EQ(asks.ask("a", 16, kTwo), 8u);
  asks.asked("a", 8);
  EXPECT_EQ(asks.ask("b", 16, kTwo), 8u);
  asks.asked("b", 8);
  asks.answered("a", 8);
  // b's request covers the rest: a is not asked for more than its share.
  EXPECT_EQ(asks.ask("a", 8, kTwo), 0u);
  asks.answered("b", 8);
  asks.step_done();  // the step trained; the next one wants 16 again
  EXPECT_EQ(asks.ask("a", 16, kTwo), 8u);
  EXPECT_EQ(asks.ask("b", 16, kTwo), 8u);
}

TEST(step_asks, an_odd_remainder_goes_to_one_shard_only) {
  step_asks asks(8);
  const uint32_t a = asks.ask("a", 1, kTwo);
  if (a) asks.asked("a", a);
  const uint32_t b = asks.ask("b", 1, kTwo);
  EXPECT_EQ(a + b, 1u);
}

TEST(step_asks, a_partial_answer_leaves_the_rest_with_its_shard) {
  step_asks asks(8);
  asks.asked("a", asks.ask("a", 16, kTwo));
  asks.asked("b", asks.ask("b", 16, kTwo));
  asks.answered("a", 5);
  EXPECT_EQ(asks.ask("a", 11, kTwo), 3u);
}

TEST(step_asks, groups_the_step_still_wants_after_every_share_are_split_again) {
  step_asks asks(8);
  asks.asked("a", asks.ask("a", 16, kTwo));
  asks.asked("b", asks.ask("b", 16, kTwo));
  asks.answered("a", 8);
  asks.answered("b", 8);
  // The ledger refused two of the groups: the step still wants them.
  const uint32_t a = asks.ask("a", 2, kTwo);
  asks.asked("a", a);
  const uint32_t b = asks.ask("b", 2, kTwo);
  EXPECT_EQ(a, 1u);
  EXPECT_EQ(b, 1u);
}

TEST(step_asks, a_shard_that_left_has_its_share_asked_of_the_others) {
  step_asks asks(8);
  asks.asked("a", asks.ask("a", 16, kTwo));
  asks.asked("b", asks.ask("b", 16, kTwo));
  asks.answered("a", 8);
  asks.forget("b");
  EXPECT_EQ(asks.ask("a", 8, {"a"}), 8u);
}

// After a failure the groups are not spread evenly: b was asked for its share and holds none
// of the step's groups, which wait on a. After a stall (the trainer's stall_ms) a is asked for
// what the step wants, whatever b's request covers (it was never asked again before: the
// step waited for the trainer's flush, 1.5 s, step after step).
TEST(step_asks, a_stall_asks_the_shards_without_a_request_for_what_the_step_wants) {
  step_asks asks(8);
  asks.asked("a", asks.ask("a", 16, kTwo));
  asks.asked("b", asks.ask("b", 16, kTwo));
  asks.answered("a", 8);
  EXPECT_EQ(asks.ask("a", 8, kTwo), 0u) << "b's request covers the rest";
  asks.stalled(8, {"a"});
  EXPECT_EQ(asks.ask("a", 8, kTwo), 8u);
  asks.asked("a", 8);
  asks.answered("a", 3);
  EXPECT_EQ(asks.ask("a", 5, kTwo), 5u) << "the rest of the stalled share stays a's";
}

TEST(step_asks, a_stall_splits_what_the_step_wants_over_the_idle_shards) {
  step_asks asks(8);
  const std::vector<std::string> three{"a", "b", "c"};
  for (const auto& s : three) asks.asked(s, asks.ask(s, 15, three));
  asks.answered("a", 5);
  asks.answered("b", 5);
  asks.stalled(5, {"a", "b"});
  const uint32_t a = asks.ask("a", 5, three);
  const uint32_t b = asks.ask("b", 5, three);
  EXPECT_EQ(a + b, 5u);
  EXPECT_GE(std::min(a, b), 2u);
  EXPECT_EQ(asks.ask("c", 5, three), 0u) << "c still has its request out";
}

// Groups spread unevenly (after a failure the ledger re-leases units onto whichever shards
// it picks; a shard near capacity is skipped): the next step is split as this one was
// delivered, so no shard is asked for groups it will not get.
TEST(step_asks, a_step_is_split_as_the_step_before_was_delivered) {
  step_asks asks(16);
  asks.asked("a", asks.ask("a", 16, kTwo));
  asks.asked("b", asks.ask("b", 16, kTwo));
  asks.answered("a", 8);
  asks.answered("b", 4);
  EXPECT_EQ(asks.ask("b", 4, kTwo), 4u);  // the rest of b's share
  asks.asked("b", 4);
  asks.stalled(4, {"a"});  // b held 4 of the step, a the other 12
  EXPECT_EQ(asks.ask("a", 4, kTwo), 4u);
  asks.asked("a", 4);
  asks.answered("a", 4);
  asks.answered("b", 0);  // (only here: a shard answers once it has a group)
  asks.step_done();
  EXPECT_EQ(asks.ask("a", 16, kTwo), 12u);
  EXPECT_EQ(asks.ask("b", 16, kTwo), 4u);
}

TEST(step_asks, a_shard_that_gave_nothing_is_not_asked_until_a_stall) {
  step_asks asks(16);
  asks.asked("a", asks.ask("a", 16, kTwo));
  asks.asked("b", asks.ask("b", 16, kTwo));
  asks.answered("a", 8);
  asks.stalled(8, {"a"});  // b's request brings nothing
  asks.asked("a", asks.ask("a", 8, kTwo));
  asks.answered("a", 8);
  asks.answered("b", 0);  // (only here: a shard answers once it has a group)
  asks.step_done();
  EXPECT_EQ(asks.ask("a", 16, kTwo), 16u);
  EXPECT_EQ(asks.ask("b", 16, kTwo), 0u);
  // A shard that joined since gets a share (the mean of the others' deliveries).
  const std::vector<std::string> three{"a", "b", "c"};
  step_asks fresh(16);
  fresh.asked("a", fresh.ask("a", 16, kTwo));
  fresh.asked("b", fresh.ask("b", 16, kTwo));
  fresh.answered("a", 8);
  fresh.answered("b", 8);
  EXPECT_EQ(fresh.ask("a", 12, three), 4u);
  EXPECT_EQ(fresh.ask("c", 12, three), 4u);
}

// A request of the step before still out is answered with this step's groups: it counts
// toward its shard's part, or the shard is asked for more than it holds of the step (seen
// after a shard's restart: every step waited 300 ms for the stall rule on one group).
TEST(step_asks, a_request_left_from_the_step_before_counts_toward_its_shards_part) {
  step_asks asks(16);
  asks.asked("a", asks.ask("a", 16, kTwo));
  asks.asked("b", asks.ask("b", 16, kTwo));
  asks.answered("a", 8);
  asks.answered("b", 7);
  EXPECT_EQ(asks.ask("b", 1, kTwo), 1u);
  asks.asked("b", 1);  // b has no more of this step: the request waits for the next one
  asks.stalled(1, {"a"});
  asks.asked("a", asks.ask("a", 1, kTwo));
  asks.answered("a", 1);
  asks.step_done();  // delivered 9 / 7
  EXPECT_EQ(asks.ask("a", 16, kTwo), 9u);
  asks.asked("a", 9);
  asks.answered("b", 1);  // the request left over brings a group of this step
  EXPECT_EQ(asks.ask("b", 15, kTwo), 6u) << "b's part is 7, its request out covered 1";
}

TEST(step_asks, without_a_step_size_every_shard_gets_a_whole_request) {
  step_asks asks(8);
  EXPECT_EQ(asks.ask("a", 0, kTwo), 8u);
  EXPECT_EQ(asks.ask("b", 0, kTwo), 8u);
}

TEST(step_asks, requests_larger_than_one_batch_are_made_in_turn) {
  step_asks asks(4);
  asks.asked("a", asks.ask("a", 16, kTwo));
  asks.answered("a", 4);
  EXPECT_EQ(asks.ask("a", 12, kTwo), 4u);
}

// Steps of random or fixed sizes against shards that answer at random with part of what they
// were asked (a shard answers with what it has once one group is ready; `empty_answers`: an
// answer may bring none, only in this model). `carry`: the requests a step leaves out are
// answered in the next (as the trainer's are), else with nothing. No step may ever be given
// more groups than it wants.
void play_random_steps(uint32_t seed, const std::vector<std::string>& shards, uint32_t per_request,
                       uint64_t max_size, bool fixed_size, bool empty_answers, bool carry) {
  std::mt19937 rng(seed);
  step_asks asks(per_request);
  std::map<std::string, uint32_t> out;  // each shard's request in flight
  for (int step = 0; step < 300; ++step) {
    const uint64_t size = fixed_size ? max_size : 1 + rng() % max_size;
    uint64_t have = 0;
    for (int round = 0; have < size && round < 10000; ++round) {
      for (const auto& s : shards)
        if (!out.count(s))
          if (uint32_t k = asks.ask(s, size - have, shards); k > 0) {
            asks.asked(s, k);
            out[s] = k;
          }
      ASSERT_FALSE(out.empty()) << "step " << step << ": nothing asked while it wants "
                                << size - have;
      auto it = out.begin();
      std::advance(it, rng() % out.size());
      const uint32_t got = empty_answers ? static_cast<uint32_t>(rng() % (it->second + 1))
                                         : 1 + static_cast<uint32_t>(rng() % it->second);
      asks.answered(it->first, got);
      have += got;
      out.erase(it);
      ASSERT_LE(have, size) << "step " << step << " was given more groups than it wanted";
    }
    ASSERT_EQ(have, size);
    if (!carry) {
      for (const auto& [s, k] : out) asks.answered(s, 0);
      out.clear();
    }
    asks.step_done();
  }
}

TEST(step_asks, random_partial_answers_never_overfill_a_step) {
  play_random_steps(7, {"a", "b", "c"}, 5, 20, false, true, false);
}

TEST(step_asks, requests_carried_into_the_next_step_never_overfill_it) {
  play_random_steps(11, kTwo, 8, 16, true, false, true);
}

}  // namespace
}  // namespace moerl::actors
