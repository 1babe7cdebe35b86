// A dead process's shm regions go; other processes' regions and names that only start with
// the same digits stay.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

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

TEST(ShmLeftovers, only_the_dead_pids_regions_are_removed) {
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

}  // namespace
}  // namespace moerl
