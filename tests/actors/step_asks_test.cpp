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
  // The step trained; the next one wants 16 again.
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

// Shards answer at random with part of what they were asked (as a shard answers with what
// it has once one group is ready): no step ever receives more groups than it wanted.
TEST(step_asks, random_partial_answers_never_overfill_a_step) {
  std::mt19937 rng(7);
  const std::vector<std::string> shards{"a", "b", "c"};
  step_asks asks(5);
  std::map<std::string, uint32_t> out;  // each shard's request in flight
  for (int step = 0; step < 200; ++step) {
    const uint64_t size = 1 + rng() % 20;
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
      const uint32_t got = static_cast<uint32_t>(rng() % (it->second + 1));
      asks.answered(it->first, got);
      have += got;
      out.erase(it);
      ASSERT_LE(have, size) << "step " << step << " was given more groups than it wanted";
    }
    ASSERT_EQ(have, size);
    for (const auto& [s, k] : out) asks.answered(s, 0);  // none left over in this model
    out.clear();
  }
}

}  // namespace
}  // namespace moerl::actors
