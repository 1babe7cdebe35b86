// The policy's byte formats keep reading what earlier versions wrote: data/ holds
// parameter bytes, Adam state and a learned reward model checkpoint written by the code
// before the formats moved to common/byte_codec.h (inputs in format_fixture.h). Today's
// code must read the values back and write the same bytes again.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "policy/reward.h"
#include "policy/task.h"
#include "policy/vocab.h"
#include "tests/policy/format_fixture.h"
#include "tests/support/temp_dir.h"

namespace moerl::policy {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string fixture_file(const std::string& name) {
  return read_file(std::string(MOERL_POLICY_FORMAT_FIXTURES) + "/" + name);
}

TEST(policy_format_fixture, parameter_bytes_of_the_earlier_version_read_back_exactly) {
  const std::string bytes = fixture_file("params.bin");
  param_layout layout;
  auto data = deserialize_params(bytes, nullptr, &layout);
  ASSERT_TRUE(data.ok()) << data.err().to_string();
  EXPECT_TRUE(layout == fixture::params_layout());
  EXPECT_EQ(*data, fixture::params_values());
  EXPECT_TRUE(serialize_params(layout, *data) == bytes);
}

TEST(policy_format_fixture, adam_state_of_the_earlier_version_loads_and_writes_the_same_bytes) {
  const std::string bytes = fixture_file("adam.bin");
  adam loaded(adam_config{}, 4);
  auto st = loaded.load(bytes);
  ASSERT_TRUE(st.ok()) << st.err().to_string();
  EXPECT_EQ(loaded.num_steps(), fixture::kAdamSteps);
  EXPECT_TRUE(loaded.serialize() == bytes);
  // The shared codec (job/param_slicing.cpp's too) reads and writes the same bytes.
  auto state = read_adam_state(bytes);
  ASSERT_TRUE(state.ok()) << state.err().to_string();
  EXPECT_EQ(state->steps, uint64_t(fixture::kAdamSteps));
  EXPECT_EQ(state->m.size(), 4u);
  EXPECT_TRUE(write_adam_state(state->steps, state->m, state->v) == bytes);
  // The moments are the ones the same two steps compute today.
  EXPECT_TRUE(fixture::make_stepped_adam().serialize() == bytes);
}

TEST(policy_format_fixture, a_reward_model_checkpoint_of_the_earlier_version_loads_and_scores) {
  auto t = make_sort_task(fixture::kRewardDigits);
  const std::string path = std::string(MOERL_POLICY_FORMAT_FIXTURES) + "/reward_model.bin";
  auto rm = learned_reward_model::load(*t, path);
  ASSERT_TRUE(rm.ok()) << rm.err().to_string();
  auto score =
      (*rm)->score(*encode(fixture::reward_prompt()), *encode(fixture::reward_completion()));
  ASSERT_TRUE(score.ok()) << score.err().to_string();
  // Printed by write_format_fixtures when the checkpoint was written.
  EXPECT_DOUBLE_EQ(*score, 0.17891750044219851);
  moerl::testing::temp_dir dir("policy-format");
  ASSERT_TRUE((*rm)->save(dir.path() + "/rm.bin").ok());
  EXPECT_TRUE(read_file(dir.path() + "/rm.bin") == read_file(path));
}

}  // namespace
}  // namespace moerl::policy
