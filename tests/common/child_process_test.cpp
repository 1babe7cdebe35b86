// A wait status reads as words wherever it is printed: "exit code 2", "killed by SIGKILL".
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

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

TEST(child_process, wait_statuses_read_as_exit_codes_and_signal_names) {
  EXPECT_EQ(describe_wait_status(status_of({"sh", "-c", "exit 2"})), "exit code 2");
  EXPECT_EQ(describe_wait_status(status_of({"true"})), "exit code 0");
  EXPECT_EQ(describe_wait_status(status_of({"sh", "-c", "kill -KILL $$"})), "killed by SIGKILL");
  EXPECT_EQ(describe_wait_status(status_of({"sh", "-c", "kill -TERM $$"})), "killed by SIGTERM");
}

// A parent that dies takes a die_with_parent child with it; this test process is the
// subreaper, so the orphan comes back here and its end can be read.
TEST(child_process, a_die_with_parent_child_is_killed_when_its_parent_dies) {
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t parent = ::fork();
  ASSERT_GE(parent, 0);
  if (parent == 0) {
    process_spec spec{{"sleep", "60"}, "", {}};
    spec.die_with_parent = true;
    auto pid = spawn_process(spec, {}, "");
    const pid_t child = pid ? *pid : -1;
    [[maybe_unused]] auto n = ::write(fds[1], &child, sizeof child);
    _exit(0);  // dies at once: its child must not outlive it
  }
  pid_t child = -1;
  ASSERT_EQ(::read(fds[0], &child, sizeof child), static_cast<ssize_t>(sizeof child));
  ::close(fds[0]);
  ::close(fds[1]);
  ASSERT_GT(child, 0);
  int st = 0;
  ASSERT_EQ(::waitpid(parent, &st, 0), parent);
  ASSERT_EQ(::waitpid(child, &st, 0), child);  // reparented to us; blocks until it ends
  // Killed, or (the parent already gone when it asked) exited 125 before exec: never the
  // full minute of `sleep 60` (exit code 0).
  const std::string end = describe_wait_status(st);
  EXPECT_TRUE(end == "killed by SIGKILL" || end == "exit code 125") << end;
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}

}  // namespace
}  // namespace moerl
