// A dead process's shm regions go; other processes' regions and names that only start with
// the same digits stay. Reaping a child killed by a signal through poll_exit/wait_exit removes
// its regions; a child that exited normally keeps them (it closed what it meant to).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <csignal>

#include "common/child_process.h"
#include "common/shm_leftovers.h"

namespace moerl {
namespace {

pid_t a_dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) _exit(0);
  int st = 0;
  ::waitpid(pid, &st, 0);
  return pid;
}

void touch(const std::string& path) { std::ofstream(path) << "x"; }

TEST(shm_leftovers, only_the_dead_pids_regions_are_removed) {
  const pid_t dead = a_dead_pid();
  const std::string d = std::to_string(dead);
  const std::string mine = "/dev/shm/" + std::to_string(::getpid()) + ":9:9";
  // "<dead>7:0:0" shares the digits but is another pid's region.
  for (const auto& p :
       {"/dev/shm/" + d + ":0:0", "/dev/shm/" + d + ":0:1", "/dev/shm/" + d + "7:0:0", mine})
    touch(p);
  EXPECT_EQ(remove_shm_regions_of(dead, "test"), 2u);
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + d + ":0:0"));
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + d + ":0:1"));
  EXPECT_TRUE(std::filesystem::exists("/dev/shm/" + d + "7:0:0"));
  EXPECT_TRUE(std::filesystem::exists(mine));
  std::filesystem::remove("/dev/shm/" + d + "7:0:0");
  std::filesystem::remove(mine);
  EXPECT_EQ(remove_shm_regions_of(dead, "test"), 0u);
}

// A child that names a region after itself, then ends by `sig` (0: exits normally).
pid_t a_child_with_a_region(int sig) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    touch("/dev/shm/" + std::to_string(::getpid()) + ":reap:0");
    if (sig) ::raise(sig);
    _exit(0);
  }
  return pid;
}

TEST(shm_leftovers, reaping_a_signalled_child_removes_its_regions) {
  const pid_t killed = a_child_with_a_region(SIGKILL);
  auto st = wait_exit(killed, 10000);
  ASSERT_TRUE(st) << st.err().to_string();
  ASSERT_TRUE(WIFSIGNALED(*st));
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + std::to_string(killed) + ":reap:0"));

  const pid_t exited = a_child_with_a_region(0);
  st = wait_exit(exited, 10000);
  ASSERT_TRUE(st) << st.err().to_string();
  const std::string kept = "/dev/shm/" + std::to_string(exited) + ":reap:0";
  EXPECT_TRUE(std::filesystem::exists(kept));
  std::filesystem::remove(kept);
}

}  // namespace
}  // namespace moerl
