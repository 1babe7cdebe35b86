// The local cluster's pod controllers (up/pod_policy.h): each role's controller is the
// kind of its manifest in deploy/base/, the replacement delay backs off to its bound, and the
// exits that mean "gave up" are told apart from those a replacement recovers from.
#include "up/pod_policy.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "common/child_process.h"

namespace moerl::up {
namespace {

// The raw wait status of a child that ended with `code` (>= 0) or was killed by -code.
int wait_status_of(int code) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (code < 0) ::raise(-code);
    ::_exit(code < 0 ? 0 : code);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  return st;
}

TEST(pod_policy, every_role_follows_the_kind_of_its_manifest) {
  for (actors::node_role r :
       {actors::node_role::coordinator, actors::node_role::buffer, actors::node_role::trainer,
        actors::node_role::weights, actors::node_role::reward, actors::node_role::env,
        actors::node_role::rollout}) {
    const std::string role = to_string(r);
    EXPECT_EQ(controller_of(role), controller_of(r)) << role;
    std::ifstream in(std::string(MOERL_SOURCE_DIR) + "/deploy/base/" + role + ".yaml");
    ASSERT_TRUE(in) << role;
    std::stringstream text;
    text << in.rdbuf();
    const std::string kind = std::string("kind: ") + controller_name(controller_of(r));
    EXPECT_NE(text.str().find(kind + "\n"), std::string::npos) << role << " is not a " << kind;
  }
}

TEST(pod_policy, the_delay_doubles_per_replacement_up_to_its_bound) {
  restart_limits l;
  l.delay = std::chrono::milliseconds(1000);
  l.backoff_max = std::chrono::milliseconds(5000);
  EXPECT_EQ(l.delay_after(0).count(), 1000);
  EXPECT_EQ(l.delay_after(1).count(), 2000);
  EXPECT_EQ(l.delay_after(2).count(), 4000);
  EXPECT_EQ(l.delay_after(3).count(), 5000);
  EXPECT_EQ(l.delay_after(1000).count(), 5000);
}

TEST(pod_policy, limits_out_of_range_are_refused_naming_the_key) {
  // The schema declares the rule (one place for validation), so the config refuses it at load.
  auto cfg = config::load("", {"cluster.restart_backoff_max_ms=10", "cluster.restart_delay_ms=50"});
  ASSERT_FALSE(cfg);
  EXPECT_NE(cfg.err().message.find("cluster.restart_backoff_max_ms"), std::string::npos);
  // A config built past the loader is refused by the limits themselves.
  config direct = config::defaults();
  ASSERT_TRUE(direct.set("cluster.restart_delay_ms", "50", "test"));
  ASSERT_TRUE(direct.set("cluster.restart_backoff_max_ms", "10", "test"));
  auto l = restart_limits::from_config(direct);
  ASSERT_FALSE(l);
  EXPECT_NE(l.err().message.find("cluster.restart_backoff_max_ms"), std::string::npos);
  auto defaults = restart_limits::from_config(config::defaults());
  ASSERT_TRUE(defaults) << defaults.err().to_string();
}

TEST(pod_policy, a_node_gives_up_with_exit_code_2_or_4_only) {
  EXPECT_TRUE(gave_up(wait_status_of(2)));
  EXPECT_TRUE(gave_up(wait_status_of(4)));
  EXPECT_FALSE(gave_up(wait_status_of(0)));  // drained or shut down
  EXPECT_FALSE(gave_up(wait_status_of(3)));  // lost the coordinator
  EXPECT_FALSE(gave_up(wait_status_of(-SIGKILL)));
}

TEST(pod_policy, exit_statuses_read_as_an_operator_reads_them) {
  EXPECT_EQ(describe_wait_status(wait_status_of(2)), "exit code 2");
  EXPECT_EQ(describe_wait_status(wait_status_of(-SIGKILL)), "killed by SIGKILL");
  EXPECT_EQ(describe_wait_status(wait_status_of(-SIGTERM)), "killed by SIGTERM");
}

}  // namespace
}  // namespace moerl::up
