// The runner's process hands on real processes: signals and their effect on the process
// state, the launch spec read back from /proc, spawning with cwd and environment, tools.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "sims/process_control.h"

namespace moerl::sims {
namespace {

// Polls until the process state matches (state changes after a signal are asynchronous).
bool wait_state(pid_t pid, char want) {
  for (int i = 0; i < 500; ++i) {
    if (process_state(pid) == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(process_control, stop_continue_and_kill_change_the_process_state) {
  launch_spec spec;
  spec.argv = {"sleep", "30"};
  auto pid = spawn_process(spec, {}, "");
  ASSERT_TRUE(pid.ok()) << pid.err().to_string();
  EXPECT_TRUE(process_alive(*pid));
  ASSERT_TRUE(send_signal(*pid, SIGSTOP).ok());
  EXPECT_TRUE(wait_state(*pid, 'T'));
  ASSERT_TRUE(send_signal(*pid, SIGCONT).ok());
  EXPECT_TRUE(wait_state(*pid, 'S'));
  ASSERT_TRUE(send_signal(*pid, SIGKILL).ok());
  auto st = wait_exit(*pid, 5000);
  ASSERT_TRUE(st.ok()) << st.err().to_string();
  EXPECT_TRUE(WIFSIGNALED(*st));
  EXPECT_EQ(WTERMSIG(*st), SIGKILL);
  EXPECT_FALSE(process_alive(*pid));
  // The pid is gone now: signalling it is "not found", not a crash or a silent success.
  auto again = send_signal(*pid, SIGKILL);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.err().code, errc::not_found);
  EXPECT_NE(again.err().message.find("::kill(pid, sig)"), std::string::npos) << again.err().message;
}

TEST(process_control, launch_spec_read_back_starts_an_identical_process) {
  char dir[] = "/tmp/moerl-sim-test-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string out = std::string(dir) + "/out.txt";
  launch_spec spec;
  spec.argv = {"sh", "-c", "pwd > out.txt; echo \"$SIM_MARK\" >> out.txt; exec sleep 30"};
  spec.cwd = dir;
  spec.env = {"SIM_MARK=first", "PATH=/usr/bin:/bin"};
  auto pid = spawn_process(spec, {}, "");
  ASSERT_TRUE(pid.ok());
  // The shell execs sleep: wait until the command line is sleep's, then read it back.
  launch_spec seen;
  for (int i = 0; i < 500; ++i) {
    auto s = read_launch_spec(*pid);
    if (s.ok() && s->argv.size() == 2 && s->argv[0] == "sleep") {
      seen = *s;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(seen.argv, (std::vector<std::string>{"sleep", "30"}));
  EXPECT_EQ(seen.cwd, dir);
  EXPECT_NE(std::find(seen.env.begin(), seen.env.end(), "SIM_MARK=first"), seen.env.end());
  std::ifstream in(out);
  std::string line1, line2;
  std::getline(in, line1);
  std::getline(in, line2);
  EXPECT_EQ(line1, dir);
  EXPECT_EQ(line2, "first");
  ASSERT_TRUE(send_signal(*pid, SIGKILL).ok());
  ASSERT_TRUE(wait_exit(*pid, 5000).ok());
  auto gone = read_launch_spec(*pid);
  EXPECT_FALSE(gone.ok());
  std::remove(out.c_str());
  ::rmdir(dir);
}

TEST(process_control, spawn_with_a_prefix_runs_the_prefix_first) {
  launch_spec spec;
  spec.argv = {"true"};
  auto pid = spawn_process(spec, {"env", "-i"}, "");
  ASSERT_TRUE(pid.ok());
  auto st = wait_exit(*pid, 5000);
  ASSERT_TRUE(st.ok());
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0);
}

TEST(process_control, failing_tool_reports_its_exit_and_output) {
  auto ok = run_tool({"true"});
  EXPECT_TRUE(ok.ok());
  auto bad = run_tool({"sh", "-c", "echo no such thing >&2; exit 3"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.err().code, errc::io_error);
  EXPECT_NE(bad.err().message.find("exit 3"), std::string::npos) << bad.err().message;
  EXPECT_NE(bad.err().message.find("no such thing"), std::string::npos) << bad.err().message;
  auto slow = run_tool({"sleep", "5"}, 100);
  ASSERT_FALSE(slow.ok());
  EXPECT_EQ(slow.err().code, errc::timeout);
}

TEST(process_control, refuses_to_signal_init_or_a_process_group) {
  EXPECT_EQ(send_signal(1, SIGKILL).err().code, errc::invalid_argument);
  EXPECT_EQ(send_signal(0, SIGKILL).err().code, errc::invalid_argument);
  EXPECT_EQ(send_signal(-5, SIGKILL).err().code, errc::invalid_argument);
}

}  // namespace
}  // namespace moerl::sims
