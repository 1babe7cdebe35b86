// job.device (job/device.h): cpu runs; cuda is refused with the reason for each thing this
// process lacks, naming the key; with a CUDA build and a visible device it is accepted for one
// process (moerl learn) and refused for a group (moerl up, node roles), naming what is missing.
#include <gtest/gtest.h>

#include <string>

#include "common/config.h"
#include "job/device.h"

namespace moerl::job {
namespace {

config with_device(const std::string& device) {
  auto cfg = config::load("", {"job.device=" + device});
  EXPECT_TRUE(cfg.ok()) << cfg.err().to_string();
  return *cfg;
}

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
  for (device_facts f :
       {device_facts{false, false}, device_facts{true, false}, device_facts{true, true}})
    EXPECT_TRUE(check_job_device(*defaults, f).ok());
}

TEST(job_device, cuda_without_a_cuda_build_names_the_build) {
  expect_refused(check_job_device(with_device("cuda"), {false, false}),
                 "this moerl was built without CUDA");
}

TEST(job_device, cuda_without_a_visible_device_says_so) {
  expect_refused(check_job_device(with_device("cuda"), {true, false}), "no CUDA device visible");
}

TEST(job_device,
     cuda_with_a_device_runs_in_one_process_and_a_group_refuses_naming_what_is_missing) {
  EXPECT_TRUE(
      check_job_device(with_device("cuda"), {true, true}, device_scope::single_process).ok());
  const status st = check_job_device(with_device("cuda"), {true, true});  // group by default
  expect_refused(st, "a group of processes cannot run the policy on the device yet");
  for (const char* missing :
       {"the expert plane on device memory", "NCCL in the trainer group", "moerl learn"})
    EXPECT_NE(st.err().message.find(missing), std::string::npos) << st.err().message;
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

// This process's own facts: whatever they are, a group refuses cuda (its device path does not
// exist yet).
TEST(job_device, this_process_refuses_cuda_with_the_reason_its_facts_give) {
  const device_facts f = probe_device_facts();
#ifdef MOERL_HAVE_CUDA
  EXPECT_TRUE(f.built_with_cuda);
#else
  EXPECT_FALSE(f.built_with_cuda);
#endif
  expect_refused(check_job_device(with_device("cuda")), !f.built_with_cuda ? "built without CUDA"
                                                        : !f.device_visible
                                                            ? "no CUDA device visible"
                                                            : "a group of processes cannot run");
}

}  // namespace
}  // namespace moerl::job
