// Reward models behind one interface: the verifier, and a learned reward model fitted to
// the verifier, saved to a checkpoint file, loaded back, and refused when the file is
// damaged or belongs to another task.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <random>

#include "policy/reward.h"

namespace moerl::policy {
namespace {

std::string temp_path(const std::string& name) {
  return testing::TempDir() + "moerl_policy_" + name;
}

TEST(verifier_reward, scores_like_the_task_and_refuses_malformed_prompts) {
  auto t = make_sort_task(3);
  auto rm = make_verifier_reward(*t);
  EXPECT_EQ(rm->kind(), "verifier");
  EXPECT_DOUBLE_EQ(*rm->score(*encode("^s312="), *encode("123$")), 1.0);
  EXPECT_FALSE(rm->score(*encode("^s31="), *encode("13$")).ok());
}

TEST(learned_reward, fitted_model_tracks_the_verifier_and_survives_a_checkpoint_round_trip) {
  auto t = make_sort_task(2);
  auto verifier = make_verifier_reward(*t);
  auto rm = learned_reward_model::create(*t, 32, 1);
  // Held-out MSE of the untrained model, for comparison.
  auto untrained = rm->fit(*verifier, 1, 1, 1e-9, 2);
  ASSERT_TRUE(untrained.ok());
  auto mse = rm->fit(*verifier, 400, 32, 1e-2, 3);
  ASSERT_TRUE(mse.ok()) << mse.err().to_string();
  std::printf("held-out MSE: untrained %.4f, fitted %.4f\n", *untrained, *mse);
  // Rewards of perturbed answers spread over [0, 1] (variance ~0.06); fitting must explain
  // most of it.
  EXPECT_LT(*mse, 0.02) << "untrained " << *untrained;
  EXPECT_LT(*mse, *untrained / 3);

  const std::string path = temp_path("rm.bin");
  ASSERT_TRUE(rm->save(path).ok());
  auto loaded = learned_reward_model::load(*t, path);
  ASSERT_TRUE(loaded.ok()) << loaded.err().to_string();
  std::mt19937_64 rng(4);
  for (int i = 0; i < 20; ++i) {
    auto p = t->generate(rng);
    auto c = rm->perturbed_completion(p, rng);
    EXPECT_DOUBLE_EQ(*rm->score(p.tokens, c), *(*loaded)->score(p.tokens, c));
  }
  std::remove(path.c_str());
}

TEST(learned_reward, is_selected_by_config_and_needs_a_path) {
  auto t = make_sort_task(2);
  auto rm = learned_reward_model::create(*t, 8, 1);
  const std::string path = temp_path("rm_cfg.bin");
  ASSERT_TRUE(rm->save(path).ok());
  auto cfg = config::load("", {"task.reward=learned", "task.reward_model_path=" + path});
  ASSERT_TRUE(cfg.ok());
  auto r = make_reward(*cfg, *t);
  ASSERT_TRUE(r.ok()) << r.err().to_string();
  EXPECT_EQ((*r)->kind(), "learned");
  auto no_path = config::load("", {"task.reward=learned"});
  auto r2 = make_reward(*no_path, *t);
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.err().code, errc::invalid_config);
  std::remove(path.c_str());
}

TEST(learned_reward, damaged_missing_or_foreign_checkpoints_are_refused_with_reasons) {
  auto sort2 = make_sort_task(2);
  auto sort3 = make_sort_task(3);
  auto rm = learned_reward_model::create(*sort2, 8, 1);
  const std::string path = temp_path("rm_bad.bin");
  ASSERT_TRUE(rm->save(path).ok());

  auto foreign = learned_reward_model::load(*sort3, path);
  ASSERT_FALSE(foreign.ok());
  EXPECT_EQ(foreign.err().code, errc::invalid_argument);
  EXPECT_NE(foreign.err().message.find("sort/2"), std::string::npos) << foreign.err().message;

  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  for (size_t cut : {size_t(4), size_t(20), bytes.size() - 1}) {
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), cut);
    auto r = learned_reward_model::load(*sort2, path);
    ASSERT_FALSE(r.ok()) << cut;
    EXPECT_EQ(r.err().code, errc::malformed_message) << cut;
  }
  std::remove(path.c_str());
  auto missing = learned_reward_model::load(*sort2, path);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.err().code, errc::io_error);
}

}  // namespace
}  // namespace moerl::policy
