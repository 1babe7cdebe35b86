// A wait status reads as words wherever it is printed: "exit code 2", "killed by SIGKILL".
#include <gtest/gtest.h>

#include <signal.h>

#include "common/child_process.h"

namespace moerl {
namespace {

int status_of(const std::vector<std::string>& argv) {
  auto pid = spawn_process({argv, "", {}}, {}, "");
  EXPECT_TRUE(pid.ok());
  auto st = wait_exit(*pid, 10000);
  EXPECT_TRUE(st.ok());
  return *st;
}

TEST(ChildProcess, wait_statuses_read_as_exit_codes_and_signal_names) {
  EXPECT_EQ(describe_wait_status(status_of({"sh", "-c", "exit 2"})), "exit code 2");
  EXPECT_EQ(describe_wait_status(status_of({"true"})), "exit code 0");
  EXPECT_EQ(describe_wait_status(status_of({"sh", "-c", "kill -KILL $$"})), "killed by SIGKILL");
  EXPECT_EQ(describe_wait_status(status_of({"sh", "-c", "kill -TERM $$"})), "killed by SIGTERM");
}

}  // namespace
}  // namespace moerl
