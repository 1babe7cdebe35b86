// job.device=cuda in the expert-parallel group and trainer (job/ep_policy_group.h,
// job/ep_trainer.h): the device ranks against the host ranks with the same weights.
//   - a rollout group of 2 device ranks (experts exchanged through the host-staged exchange)
//     generates the rows the host group does (tokens equal; see policy/cuda/model_cuda.h's
//     test for why a draw may differ only at a bucket edge), and back at version 0 too;
//   - a trainer step of 1 device rank (NCCL communicator of one) gives the host step's
//     parameters to 1e-3 of the largest change, the same gradient norm to 1e-3, and its shares
//     and Adam state serialise and load back;
//   - the same with 2 ranks where 2 devices are visible (NCCL puts each rank on its own).
// Runs where a GPU is visible; elsewhere skipped saying so. NOT YET RUN ON A GPU when written
// (no device on the build machine): bench/gpu_check.sh's moerl up step runs the path whole.
// (The refusal without a device is device_test.cpp's: it runs everywhere.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "common/config.h"
#include "job/device.h"
#include "job/ep_policy_group.h"
#include "job/ep_trainer.h"
#include "policy/params.h"
#include "tests/job/ep_fixture.h"

namespace moerl::job {
namespace {

using testing::node_config;

#define REQUIRE_GPUS(n, what)                                                                      \
  do {                                                                                             \
    if (probe_device_facts().device_count < (n))                                                   \
      GTEST_SKIP() << "no CUDA device visible (" << (n) << " needed): " << what << " not checked"; \
  } while (0)

config device_config(const std::string& device) {
  auto cfg = config::load("", {"fabric.provider=shm", "fabric.require_provider=true",
                               "fabric.op_timeout_ms=20000", "job.device=" + device});
  EXPECT_TRUE(cfg.ok()) << cfg.err().to_string();
  return *cfg;
}

policy::model_config small_model() {
  auto c = testing::small_model(13);
  c.aux_loss_coef = 0.0f;  // per-rank in EP (ep_trainer.h): off, so that the steps compare
  return c;
}

// Full parameters moved off their start, as the trainer would have them.
std::string trained_looking_bytes(const policy::model_config& model) {
  auto local = policy::make_local_expert_exchange();
  auto pol = policy::moe_policy::create(model, *local);
  EXPECT_TRUE(pol.ok());
  testing::perturb(**pol, 4);
  return (*pol)->serialize();
}

TEST(ep_device, a_rollout_group_on_the_device_generates_the_host_groups_rows) {
  REQUIRE_GPUS(1, "the device rollout group");
  const auto model = small_model();
  const std::string bytes = trained_looking_bytes(model);
  ep_group_shape shape;
  shape.num_ranks = 2;
  shape.max_decode_rows = 4;
  auto host = ep_policy_group::create(device_config("cpu"), model, shape);
  auto dev = ep_policy_group::create(device_config("cuda"), model, shape);
  ASSERT_TRUE(host.ok()) << host.err().to_string();
  ASSERT_TRUE(dev.ok()) << dev.err().to_string();
  EXPECT_TRUE((*dev)->on_device());
  EXPECT_FALSE((*host)->on_device());
  ASSERT_TRUE((*host)->load(bytes).ok());
  ASSERT_TRUE((*dev)->load(bytes).ok());
  const std::vector<policy::token_id> prompt{3, 5, 7, 4, 2};
  for (uint64_t seed : {17ull, 18ull}) {
    auto want = (*host)->generate(prompt, 7, 8, 1.0f, seed);
    auto got = (*dev)->generate(prompt, 7, 8, 1.0f, seed);
    ASSERT_TRUE(want.ok()) << want.err().to_string();
    ASSERT_TRUE(got.ok()) << got.err().to_string();
    EXPECT_EQ(got->completions, want->completions) << "seed " << seed;
  }
  // The shares come back as loaded (host copies for publication), and version 0 is the init.
  auto full = (*dev)->full_params();
  ASSERT_TRUE(full.ok()) << full.err().to_string();
  EXPECT_TRUE(policy::serialize_params((*dev)->full_layout(), *full) == bytes);
  ASSERT_TRUE((*host)->reset_to_init().ok());
  ASSERT_TRUE((*dev)->reset_to_init().ok());
  auto want = (*host)->generate(prompt, 7, 8, 1.0f, 5);
  auto got = (*dev)->generate(prompt, 7, 8, 1.0f, 5);
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_EQ(got->completions, want->completions);
}

// One step of `ranks` device ranks against the same step on host ranks.
void expect_device_step_matches_host(int ranks) {
  const auto model = small_model();
  const std::string bytes = trained_looking_bytes(model);
  policy::grpo_config grpo;
  grpo.group_size = 4;
  policy::adam_config adam;
  adam.learning_rate = 1e-2;
  adam.eps = 1e-3;  // smooth in the gradient (ep_trainer_test.cpp says why)
  adam.grad_clip = 0.05;
  auto host = ep_trainer::create(device_config("cpu"), model, grpo, adam, 1.0f, ranks, 32);
  auto dev = ep_trainer::create(device_config("cuda"), model, grpo, adam, 1.0f, ranks, 32);
  ASSERT_TRUE(host.ok()) << host.err().to_string();
  ASSERT_TRUE(dev.ok()) << dev.err().to_string();
  ASSERT_TRUE((*host)->load(bytes).ok());
  ASSERT_TRUE((*dev)->load(bytes).ok());
  const auto b = testing::make_training_batch(model, 100);
  auto hs = (*host)->step(b.samples, b.advantages);
  auto ds = (*dev)->step(b.samples, b.advantages);
  ASSERT_TRUE(hs.ok()) << hs.err().to_string();
  ASSERT_TRUE(ds.ok()) << ds.err().to_string();
  EXPECT_NEAR(ds->grad_norm, hs->grad_norm, 1e-3 * hs->grad_norm);
  auto hb = (*host)->serialize();
  auto db = (*dev)->serialize();
  ASSERT_TRUE(hb.ok() && db.ok()) << (db.ok() ? "" : db.err().to_string());
  const policy::param_layout& full = (*host)->full_layout();
  auto start = policy::deserialize_params(bytes, &full);
  auto want = policy::deserialize_params(*hb, &full);
  auto got = policy::deserialize_params(*db, &full);
  ASSERT_TRUE(start.ok() && want.ok() && got.ok());
  ASSERT_EQ(got->size(), want->size());
  double max_change = 0, max_diff = 0;
  for (size_t i = 0; i < want->size(); ++i) {
    max_change = std::max(max_change, double(std::fabs((*want)[i] - (*start)[i])));
    max_diff = std::max(max_diff, double(std::fabs((*got)[i] - (*want)[i])));
  }
  EXPECT_GT(max_change, 1e-3);
  EXPECT_LT(max_diff, 1e-3 * std::max(1.0, max_change * 100)) << "max change " << max_change;
  // Checkpoint parts (device -> host) load back.
  auto parts = (*dev)->local_state();
  ASSERT_TRUE(parts.ok()) << parts.err().to_string();
  EXPECT_EQ(parts->size(), size_t(2 * ranks));
  EXPECT_TRUE((*dev)->load_local_state(*parts).ok());
  auto a = (*dev)->serialize_adam();
  ASSERT_TRUE(a.ok()) << a.err().to_string();
  EXPECT_TRUE((*dev)->load_adam(*a).ok());
}

TEST(ep_device, a_trainer_step_on_one_device_rank_matches_the_host_step) {
  REQUIRE_GPUS(1, "the device trainer step (one rank, NCCL communicator of one)");
  expect_device_step_matches_host(1);
}

TEST(ep_device, a_trainer_step_on_two_device_ranks_matches_the_host_step) {
  REQUIRE_GPUS(2, "the device trainer step over NCCL (two ranks, one device each)");
  expect_device_step_matches_host(2);
}

}  // namespace
}  // namespace moerl::job
