// The runner's two fault deliveries (sims/fault_delivery.h) on real processes: the processes
// backend signals a pid and starts a replacement from a command line; the command backend
// runs a delivery script (a stand-in for `scripts/pods.sh fault`, which needs podman and
// root) in the background, counts the node gone once the script returned, and reads the
// replacement's name from the script's last line.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "sims/fault_delivery.h"
#include "tests/support/temp_dir.h"

namespace moerl::sims {
namespace {

// Polls `done` every 20 ms for up to 10 s.
template <typename F>
bool eventually(F done) {
  for (int i = 0; i < 500; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

pid_t start_sleeper() {
  launch_spec spec;
  spec.argv = {"sleep", "60"};
  auto pid = spawn_process(spec, {}, "");
  EXPECT_TRUE(pid.ok()) << pid.err().to_string();
  return pid ? *pid : 0;
}

TEST(fault_delivery, processes_signal_the_pid_and_replace_from_the_command_line) {
  testing::temp_dir dir("fault-delivery");
  const pid_t victim = start_sleeper();
  ASSERT_GT(victim, 0);
  known_node k{"rollout", {}};
  k.spec.argv = {"sleep", "60"};
  auto d = process_delivery({{"rollout-0", k}}, dir.path(), [](const node_view&) { return ""; });
  const node_ref ref{"rollout-0", "rollout", victim};
  EXPECT_FALSE(d->enforces_grace());
  EXPECT_EQ(d->gone(ref), std::optional<bool>(false));
  ASSERT_TRUE(d->deliver(ref, blow::kill, 0).ok());
  ASSERT_TRUE(wait_exit(victim, 5000).ok());
  EXPECT_EQ(d->gone(ref), std::optional<bool>(true));
  // A node without a pid cannot be struck, and the backend cannot tell whether it is gone.
  EXPECT_FALSE(d->deliver({"rollout-1", "rollout", 0}, blow::kill, 0).ok());
  EXPECT_EQ(d->gone({"rollout-1", "rollout", 0}), std::nullopt);

  ASSERT_TRUE(d->start_replacement(ref, "rollout-0-r1").ok());
  auto name = d->replacement("rollout-0");
  ASSERT_TRUE(name.ok()) << name.err().to_string();
  EXPECT_EQ(*name, "rollout-0-r1");
  ASSERT_EQ(d->spawned().size(), 1u);
  const pid_t replacement = d->spawned()[0];
  EXPECT_TRUE(process_alive(replacement));
  ASSERT_TRUE(send_signal(replacement, SIGKILL).ok());
  ASSERT_TRUE(wait_exit(replacement, 5000).ok());
  // No command line of any node of the role: refused by name.
  auto none = d->start_replacement({"env-0", "env", 0}, "env-0-r1");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.err().message.find("env"), std::string::npos) << none.err().message;
}

// The stand-in platform: NODE's process is the pid in DIR/NODE.pid; every action is logged
// to DIR/actions; kill and terminate return once the process is gone, as pods.sh's do.
std::string write_platform(const std::string& dir) {
  const std::string path = dir + "/platform.sh";
  std::ofstream(path) << "#!/bin/sh\n"
                         "dir=$(dirname \"$0\"); action=$1; node=$2\n"
                         "echo \"$*\" >> \"$dir/actions\"\n"
                         "pid=$(cat \"$dir/$node.pid\" 2>/dev/null)\n"
                         "[ -n \"$pid\" ] || [ \"$action\" = replace ] || "
                         "{ echo \"no pod runs node $node\" >&2; exit 2; }\n"
                         "case $action in\n"
                         "  kill) kill -KILL \"$pid\" ;;\n"
                         "  terminate) kill -TERM \"$pid\" ;;\n"
                         "  stop) kill -STOP \"$pid\"; exit 0 ;;\n"
                         "  cont) kill -CONT \"$pid\"; exit 0 ;;\n"
                         "  replace) [ \"$3\" != bad ] || { echo \"play failed\"; exit 1; }\n"
                         "    echo starting the new pod; echo \"$3-from-platform\"; exit 0 ;;\n"
                         "  *) echo \"unknown action $action\" >&2; exit 2 ;;\n"
                         "esac\n"
                         "while kill -0 \"$pid\" 2>/dev/null; do sleep 0.05; done\n";
  ::chmod(path.c_str(), 0755);
  return path;
}

TEST(fault_delivery, a_command_strikes_in_the_background_and_names_the_replacement) {
  testing::temp_dir dir("fault-delivery");
  const std::string platform = write_platform(dir.path());
  // A process that only ends on SIGKILL stands for a drain that outlasts the grace; the
  // platform's terminate returns once it is gone.
  launch_spec spec;
  spec.argv = {"sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"};
  auto victim = spawn_process(spec, {}, "");
  ASSERT_TRUE(victim.ok());
  std::ofstream(dir.path() + "/rollout-a.pid") << *victim;

  auto d = command_delivery(platform + " ", dir.path());
  ASSERT_TRUE(d.ok()) << d.err().to_string();
  fault_delivery& cmd = **d;
  EXPECT_TRUE(cmd.enforces_grace());
  const node_ref ref{"rollout-a", "rollout", 2};  // a pid inside a container: never signalled
  EXPECT_EQ(cmd.gone(ref), std::nullopt);         // nothing delivered: the console decides
  ASSERT_TRUE(cmd.deliver(ref, blow::stop, 0).ok());
  ASSERT_TRUE(cmd.deliver(ref, blow::cont, 0).ok());
  ASSERT_TRUE(cmd.deliver(ref, blow::terminate, 11).ok());
  // SIGTERM is ignored: the platform's command still runs, so the node is not gone.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(cmd.gone(ref), std::nullopt);
  EXPECT_TRUE(process_alive(*victim));
  ASSERT_TRUE(send_signal(*victim, SIGKILL).ok());  // the grace ran out
  ASSERT_TRUE(wait_exit(*victim, 5000).ok());
  EXPECT_TRUE(eventually([&] { return cmd.gone(ref) == std::optional<bool>(true); }));

  ASSERT_TRUE(cmd.start_replacement(ref, "rollout-a-r1").ok());
  result<std::string> name = std::string();
  EXPECT_TRUE(eventually([&] {
    name = cmd.replacement("rollout-a");
    return !name || !name->empty();
  }));
  ASSERT_TRUE(name.ok()) << name.err().to_string();
  EXPECT_EQ(*name, "rollout-a-r1-from-platform");

  std::ifstream actions(dir.path() + "/actions");
  std::string all((std::istreambuf_iterator<char>(actions)), std::istreambuf_iterator<char>());
  EXPECT_NE(all.find("stop rollout-a\n"), std::string::npos) << all;
  EXPECT_NE(all.find("cont rollout-a\n"), std::string::npos) << all;
  EXPECT_NE(all.find("terminate rollout-a 11"), std::string::npos) << all;
  EXPECT_NE(all.find("replace rollout-a rollout-a-r1\n"), std::string::npos) << all;
}

TEST(fault_delivery, a_failing_command_is_reported_not_taken_for_success) {
  testing::temp_dir dir("fault-delivery");
  const std::string platform = write_platform(dir.path());
  auto d = command_delivery(platform, dir.path());
  ASSERT_TRUE(d.ok());
  fault_delivery& cmd = **d;
  // A synchronous blow at a node the platform does not know fails with the command's words.
  auto st = cmd.deliver({"nobody", "rollout", 0}, blow::stop, 0);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("no pod runs node nobody"), std::string::npos)
      << st.err().message;
  // A background kill that failed proves nothing about the node: not gone.
  ASSERT_TRUE(cmd.deliver({"nobody", "rollout", 0}, blow::kill, 0).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(cmd.gone({"nobody", "rollout", 0}), std::nullopt);
  // A replacement the platform could not start is an error naming the command's last words.
  ASSERT_TRUE(cmd.start_replacement({"nobody", "rollout", 0}, "bad").ok());
  result<std::string> name = std::string();
  EXPECT_TRUE(eventually([&] {
    name = cmd.replacement("nobody");
    return !name || !name->empty();
  }));
  ASSERT_FALSE(name.ok());
  EXPECT_NE(name.err().message.find("play failed"), std::string::npos) << name.err().message;
  EXPECT_FALSE(command_delivery("   ", dir.path()).ok());
}

}  // namespace
}  // namespace moerl::sims
