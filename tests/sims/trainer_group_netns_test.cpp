// A trainer group whose two members run on different "hosts" (issue 12): trainer-1 inside its
// own network namespace, joined to the host by the sims' partition link (sims/netns_link.h),
// trainer-0 on the host, the expert plane on fabric.provider=tcp;ofi_rxm. The members are then
// at distance "network": experts and the dense all-reduce cross between the namespaces over
// tcp. A short GRPO run (moerl's local job, every node a real process) trains to its end with
// nothing lost or duplicated, and trainer-0's expert plane shows the tcp provider and a
// network path to trainer-1's rank.
// Where namespaces are unavailable (no root, a container that forbids them) the test says so
// and runs both members on loopback, every peer through the libfabric endpoint
// (fabric.paths=fabric), so the expert plane still runs over tcp between the processes.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "sims/job_console.h"
#include "sims/netns_link.h"
#include "tests/support/temp_dir.h"
#include "up/local_job.h"

namespace moerl {
namespace {

// The node named `name` in a `nodes` reply.
const sims::node_view* find_node(const std::vector<sims::node_view>& nodes,
                                 const std::string& name) {
  for (const auto& n : nodes)
    if (n.name == name && n.state == "running") return &n;
  return nullptr;
}

TEST(trainer_group_netns, members_in_separate_namespaces_train_over_tcp) {
  testing::temp_dir tmp("netns-group");
  const std::string netns_why = sims::netns_link::unavailable_reason();
  if (!netns_why.empty())
    std::cout << "network namespaces unavailable (" << netns_why
              << "): both trainer members run on loopback, the expert plane over tcp there\n";
  std::unique_ptr<sims::netns_link> link;
  if (netns_why.empty()) {
    auto l = sims::netns_link::create(0);
    ASSERT_TRUE(l.ok()) << l.err().to_string();
    link = std::move(*l);
  }

  // The host's nodes bind their tcp endpoints on loopback, which the namespace routes to the
  // host: libfabric's own choice may be any interface, e.g. another run's veth that goes away.
  ::setenv("FI_TCP_IFACE", "lo", 1);
  up::local_job_options o;
  o.binary = MOERL_BINARY;
  o.log_dir = tmp.path() + "/logs";
  o.store_prefix = "netns";
  o.iterations = 12;
  o.one_blas_thread_per_node = true;
  auto port = up::free_tcp_port();
  ASSERT_TRUE(port.ok()) << port.err().to_string();
  o.console = "tcp://127.0.0.1:" + std::to_string(*port);
  o.overrides = {"store.url=" + tmp.path() + "/store",
                 "trainer.group_size=2",
                 "job.trainer_ep_ranks=1",
                 "fabric.provider=tcp;ofi_rxm",
                 "fabric.require_provider=true",
                 "policy.d_model=16",
                 "policy.num_heads=2",
                 "policy.ffn_dim=8",
                 "grpo.prompts_per_iteration=8"};
  if (!link) o.overrides.push_back("fabric.paths=fabric");
  // trainer-1 joins below, inside the namespace when there is one.
  o.nodes = {{"buffer", "buffer-0", {}},   {"weights", "weights-0", {}},
             {"trainer", "trainer-0", {}}, {"reward", "reward-0", {}},
             {"rollout", "rollout-0", {}}, {"rollout", "rollout-1", {}}};
  auto job = up::local_job::configure(std::move(o));
  ASSERT_TRUE(job.ok()) << job.err().to_string();
  up::local_job& j = **job;
  ASSERT_TRUE(j.start().ok());
  // Inside, the tcp endpoint binds the namespace's end of the veth (its only address).
  std::vector<std::string> prefix;
  if (link) {
    prefix = link->exec_prefix();
    prefix.insert(prefix.end(), {"env", "FI_TCP_IFACE=" + link->ns_interface()});
  }
  ASSERT_TRUE(j.add_node({"trainer", "trainer-1", {}}, prefix).ok());

  up::run_policy policy;
  policy.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(400);  // liveness
  policy.spot_interruption = false;
  std::string last_progress;
  up::job_events events;
  events.progress = [&](const std::string& line) { last_progress = line; };
  const auto outcome = j.run(policy, events);

  // The trainer's figures (its expert plane) from the console while every node still runs.
  sims::job_console console(j.console_address(), j.node_config().get_string("console.token"),
                            static_cast<int>(j.node_config().get_int("console.timeout_ms")));
  auto body = console.call("nodes");
  auto report = j.settled_report(outcome == up::run_outcome::done);
  (void)j.stop(15000);
  ASSERT_EQ(outcome, up::run_outcome::done)
      << j.failure() << "; last progress: " << last_progress << "\n"
      << report.dump(1);

  const auto& acc = report["accounting"];
  EXPECT_EQ(acc.value("lost", -1), 0) << acc.dump();
  EXPECT_EQ(acc.value("duplicated", -1), 0) << acc.dump();
  ASSERT_TRUE(report.contains("groups")) << report.dump(1);
  ASSERT_EQ(report["groups"].size(), 1u) << report["groups"].dump();
  EXPECT_EQ(report["groups"][0]["members"], nlohmann::json::array({"trainer-0", "trainer-1"}));

  ASSERT_TRUE(body.ok()) << body.err().to_string();
  auto nodes = sims::parse_nodes(*body);
  ASSERT_TRUE(nodes.ok()) << nodes.err().to_string();
  const sims::node_view* t0 = find_node(*nodes, "trainer-0");
  ASSERT_NE(t0, nullptr) << body->dump(1);
  EXPECT_EQ(t0->group, "trainer");
  const auto plane =
      t0->stats.value("job", nlohmann::json::object()).value("expert_plane", nlohmann::json());
  ASSERT_TRUE(plane.is_object()) << t0->stats.dump(1);
  EXPECT_EQ(plane.value("provider", std::string()), "tcp;ofi_rxm") << plane.dump();
  if (link) {  // rank 1 is trainer-1's, on another host (namespace)
    ASSERT_EQ(plane["peer_paths"].size(), 2u) << plane.dump();
    EXPECT_EQ(plane["peer_paths"][1], "network") << plane.dump();
  } else {  // fabric.paths=fabric: the bare endpoint, every peer through tcp (no paths listed)
    EXPECT_TRUE(plane["peer_paths"].empty()) << plane.dump();
  }
  std::cout << "trainer-0's expert plane: " << plane.dump() << " ("
            << (link ? "trainer-1 in namespace " + link->name() : std::string("loopback")) << ")\n";
}

}  // namespace
}  // namespace moerl
