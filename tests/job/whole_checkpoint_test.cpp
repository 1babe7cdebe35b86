// A sharded checkpoint's rank parts put back together as the whole model and Adam state (what
// a trainer of another shape loads): equal, byte for byte, to what the writing trainer holds;
// a missing or misnamed rank part is refused by name.
#include <gtest/gtest.h>

#include "job/ep_trainer.h"
#include "job/whole_checkpoint.h"
#include "tests/job/ep_fixture.h"

namespace moerl::job {
namespace {

std::unique_ptr<ep_trainer> two_rank_trainer() {
  policy::grpo_config grpo;
  grpo.group_size = 4;
  auto model = testing::small_model(31);
  model.aux_loss_coef = 0.0f;
  auto t =
      ep_trainer::create(testing::node_config(), model, grpo, policy::adam_config{}, 1.0f, 2, 32);
  EXPECT_TRUE(t.ok()) << t.err().to_string();
  return t.ok() ? std::move(*t) : nullptr;
}

// The trainer's state as one shard's parts would be named in the manifest.
std::vector<store::checkpoint_part> shard_parts(const ep_trainer& t) {
  std::vector<store::checkpoint_part> out;
  auto state = t.local_state();
  EXPECT_TRUE(state.ok());
  for (auto& p : *state) out.push_back({"shard-0000/" + p.name, p.bytes});
  return out;
}

TEST(whole_checkpoint, rank_parts_assemble_to_the_trainers_whole_model_and_moments) {
  auto t = two_rank_trainer();
  ASSERT_TRUE(t);
  auto model = testing::small_model(31);
  model.aux_loss_coef = 0.0f;
  auto b = testing::make_training_batch(model, 7);
  ASSERT_TRUE(t->step(b.samples, b.advantages, 1).ok());  // moments are not zero any more
  auto whole = assemble_whole_state(shard_parts(*t), 2, t->full_layout());
  ASSERT_TRUE(whole.ok()) << whole.err().to_string();
  EXPECT_EQ(whole->params, *t->serialize());
  EXPECT_EQ(whole->adam, *t->serialize_adam());
  // And back: a one-rank view of the same state (the whole model as rank 0) assembles too.
  auto one = assemble_whole_state(
      {{"shard-0000/rank-0/params", whole->params}, {"shard-0000/rank-0/adam", whole->adam}}, 1,
      t->full_layout());
  ASSERT_TRUE(one.ok()) << one.err().to_string();
  EXPECT_EQ(one->params, whole->params);
  EXPECT_EQ(one->adam, whole->adam);
}

TEST(whole_checkpoint, a_missing_or_misnamed_rank_part_is_refused_by_name) {
  auto t = two_rank_trainer();
  ASSERT_TRUE(t);
  auto parts = shard_parts(*t);
  auto missing = parts;
  missing.erase(missing.begin() + 3);  // rank-1/adam
  auto m = assemble_whole_state(missing, 2, t->full_layout());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.err().message.find("no rank-1/adam"), std::string::npos) << m.err().message;
  auto odd = parts;
  odd[0].name = "shard-0000/rank-7/params";
  auto o = assemble_whole_state(odd, 2, t->full_layout());
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.err().message.find("rank-7/params' names no rank below 2"), std::string::npos)
      << o.err().message;
}

}  // namespace
}  // namespace moerl::job
