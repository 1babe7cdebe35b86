// A process killed with SIGKILL leaves its shm endpoint regions in /dev/shm, named after its
// pid; a later process with the same pid used to fail fi_enable with EBUSY (seen in CI).
// Here the leftovers are planted under this process's own pid before its first endpoint:
// the endpoint must open, and the leftovers must be gone. One test per process on purpose:
// the clean-up runs before a process's first shm endpoint only.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "fabric/rdm_endpoint.h"

using namespace moerl::fabric;

TEST(shm_leftovers, regions_left_under_our_pid_do_not_block_the_first_endpoint) {
  const std::string pid = std::to_string(::getpid());
  std::vector<std::filesystem::path> planted;
  for (const char* suffix : {":0:0", ":0:1", ":1:0", ":leftover"}) {
    planted.push_back(std::filesystem::path("/dev/shm") / (pid + suffix));
    std::ofstream(planted.back()) << "left by a dead process";
  }
  transport_options o;
  o.provider = "shm";
  o.require_provider = true;
  auto ep = rdm_endpoint::open(o);
  ASSERT_TRUE(ep) << ep.err().to_string();
  // A region libfabric created for our endpoint may reuse a name; ours is not the planted file.
  for (const auto& p : planted) {
    if (!std::filesystem::exists(p)) continue;
    std::ifstream in(p);
    std::string first;
    std::getline(in, first);
    EXPECT_NE(first, "left by a dead process") << p << " survived";
  }
}
