// Writes the policy byte-format fixtures of format_fixture.h into DIR (params.bin,
// adam.bin, reward_model.bin) and prints the learned reward model's score of the fixture
// prompt, which policy_format_fixture_test asserts. tests/policy/data/ was made with it by
// the code of that time; rerun it only to add fixtures for a new format version.
#include <cstdio>
#include <fstream>

#include "policy/reward.h"
#include "policy/task.h"
#include "policy/vocab.h"
#include "tests/policy/format_fixture.h"

namespace {

bool write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  return bool(f);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace moerl::policy;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  bool ok = write_file(dir + "/params.bin",
                       serialize_params(fixture::params_layout(), fixture::params_values()));
  ok = ok && write_file(dir + "/adam.bin", fixture::make_stepped_adam().serialize());
  auto t = make_sort_task(fixture::kRewardDigits);
  auto rm = learned_reward_model::create(*t, fixture::kRewardHidden, fixture::kRewardSeed);
  ok = ok && rm->save(dir + "/reward_model.bin").ok();
  auto score = rm->score(*encode(fixture::reward_prompt()), *encode(fixture::reward_completion()));
  if (!ok || !score) {
    std::fprintf(stderr, "writing the fixtures failed\n");
    return 1;
  }
  std::printf("reward model score: %.17g\n", *score);
  return 0;
}
