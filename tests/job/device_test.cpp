// job.device (job/device.h): cpu runs; cuda is refused with the reason for each thing this
// process lacks, naming the key; with a CUDA build and a visible device it is accepted for one
// process (moerl learn), and for a group (moerl up, node roles) when NCCL is built in and every
// trainer rank of this process has its own device.
#include <gtest/gtest.h>

#include <string>

#include "common/config.h"
#include "job/device.h"
#include "job/ep_policy_group.h"
#include "tests/job/ep_fixture.h"

namespace moerl::job {
namespace {

// One trainer rank per process (job.trainer_ep_ranks defaults to 2, which needs 2 devices).
config with_device(const std::string& device) {
  auto cfg = config::load("", {"job.device=" + device, "job.trainer_ep_ranks=1"});
  EXPECT_TRUE(cfg.ok()) << cfg.err().to_string();
  return *cfg;
}

// A CUDA build with NCCL and one device.
constexpr device_facts kOneDevice{true, true, true, 1};

void expect_refused(const status& st, const std::string& words) {
  ASSERT_FALSE(st.ok()) << "accepted; expected: " << words;
  EXPECT_EQ(st.err().code, errc::invalid_config) << st.err().to_string();
  EXPECT_EQ(st.err().message.rfind("job.device=cuda: ", 0), 0u) << st.err().message;
  EXPECT_NE(st.err().message.find(words), std::string::npos) << st.err().message;
}

TEST(job_device, cpu_is_the_default_and_runs_whatever_the_build) {
  auto defaults = config::load("", {});
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->get_string("job.device"), "cpu");
  for (device_facts f : {device_facts{false, false}, device_facts{true, false}, kOneDevice})
    EXPECT_TRUE(check_job_device(*defaults, f).ok());
}

TEST(job_device, cuda_without_a_cuda_build_names_the_build) {
  expect_refused(check_job_device(with_device("cuda"), {false, false}),
                 "this moerl was built without CUDA");
}

TEST(job_device, cuda_without_a_visible_device_says_so) {
  expect_refused(check_job_device(with_device("cuda"), {true, false}), "no CUDA device visible");
}

TEST(job_device, cuda_with_a_device_and_nccl_runs_in_one_process_and_in_a_group) {
  EXPECT_TRUE(check_job_device(with_device("cuda"), kOneDevice, device_scope::single_process).ok());
  EXPECT_TRUE(check_job_device(with_device("cuda"), kOneDevice).ok());  // group by default
}

TEST(job_device, a_group_without_nccl_refuses_naming_the_trainer_plane) {
  const device_facts no_nccl{true, true, false, 1};
  EXPECT_TRUE(check_job_device(with_device("cuda"), no_nccl, device_scope::single_process).ok());
  const status st = check_job_device(with_device("cuda"), no_nccl);
  expect_refused(st, "built without it");
  for (const char* words : {"NCCL", "trainer group", "MOERL_HAVE_NCCL"})
    EXPECT_NE(st.err().message.find(words), std::string::npos) << st.err().message;
}

TEST(job_device, more_trainer_ranks_in_a_process_than_devices_are_refused_with_the_counts) {
  auto cfg = config::load("", {"job.device=cuda", "job.trainer_ep_ranks=2"});
  ASSERT_TRUE(cfg.ok()) << cfg.err().to_string();
  const status st = check_job_device(*cfg, kOneDevice);
  expect_refused(st, "2 trainer ranks on this host");
  EXPECT_NE(st.err().message.find("1 CUDA device(s) visible"), std::string::npos)
      << st.err().message;
  EXPECT_TRUE(check_job_device(*cfg, device_facts{true, true, true, 2}).ok());
  // One process (moerl learn) runs no trainer group: the count does not matter there.
  EXPECT_TRUE(check_job_device(*cfg, kOneDevice, device_scope::single_process).ok());
}

TEST(job_device, a_launcher_checks_the_whole_trainer_group_on_its_host) {
  expect_refused(check_trainer_devices(with_device("cuda"), 2, kOneDevice),
                 "2 trainer ranks on this host");
  EXPECT_TRUE(check_trainer_devices(with_device("cuda"), 1, kOneDevice).ok());
  // job.device=cpu places nothing on devices.
  EXPECT_TRUE(check_trainer_devices(with_device("cpu"), 8, device_facts{}).ok());
}

TEST(job_device, ranks_take_devices_round_robin) {
  const device_facts two{true, true, true, 2};
  EXPECT_EQ(device_of_rank(0, two), 0);
  EXPECT_EQ(device_of_rank(1, two), 1);
  EXPECT_EQ(device_of_rank(3, two), 1);
  EXPECT_EQ(device_of_rank(5, device_facts{}), 0);
}

TEST(job_device, one_process_still_refuses_cuda_without_the_build_or_a_device) {
  expect_refused(
      check_job_device(with_device("cuda"), {false, false}, device_scope::single_process),
      "this moerl was built without CUDA");
  expect_refused(check_job_device(with_device("cuda"), {true, false}, device_scope::single_process),
                 "no CUDA device visible");
}

TEST(job_device, other_devices_are_refused_by_the_schema_naming_the_key) {
  auto cfg = config::load("", {"job.device=rocm"});
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.err().code, errc::invalid_config);
  EXPECT_NE(cfg.err().message.find("job.device"), std::string::npos) << cfg.err().message;
}

// This process's own facts: the build's flags as compiled, and the verdict they give (here,
// with no device, a refusal naming what is missing; on a GPU machine with NCCL, ok).
TEST(job_device, this_process_checks_cuda_against_its_own_facts) {
  const device_facts f = probe_device_facts();
#ifdef MOERL_HAVE_CUDA
  EXPECT_TRUE(f.built_with_cuda);
#else
  EXPECT_FALSE(f.built_with_cuda);
  EXPECT_EQ(f.device_count, 0);
#endif
  EXPECT_EQ(f.device_visible, f.device_count > 0);
  const status st = check_job_device(with_device("cuda"));
  if (!f.built_with_cuda)
    expect_refused(st, "built without CUDA");
  else if (!f.device_visible)
    expect_refused(st, "no CUDA device visible");
  else if (!f.built_with_nccl)
    expect_refused(st, "built without it");
  else
    EXPECT_TRUE(st.ok()) << st.err().to_string();
}

// Past the launch check, a group told job.device=cuda where no device is visible (or no CUDA
// is built in) fails as a value naming why: it never runs on the host instead.
TEST(job_device, a_group_without_a_device_refuses_cuda_instead_of_running_on_the_host) {
  if (probe_device_facts().device_visible) GTEST_SKIP() << "a CUDA device is visible here";
  auto cfg =
      config::load("", {"fabric.provider=shm", "fabric.require_provider=true", "job.device=cuda"});
  ASSERT_TRUE(cfg.ok()) << cfg.err().to_string();
  ep_group_shape shape;
  shape.num_ranks = 2;
  shape.max_decode_rows = 4;
  auto g = ep_policy_group::create(*cfg, testing::small_model(13), shape);
  ASSERT_FALSE(g.ok()) << "job.device=cuda ran without a device";
  const std::string why = g.err().to_string();
  EXPECT_TRUE(why.find("cudaSetDevice") != std::string::npos ||
              why.find("built without CUDA") != std::string::npos)
      << why;
}

}  // namespace
}  // namespace moerl::job
