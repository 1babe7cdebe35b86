// `moerl up` through the expert-parallel paths: a short GRPO run (20 policy iterations, no
// injected interruption) with 2 EP ranks per rollout worker and 2 trainer ranks finishes
// cleanly — nothing lost or duplicated, a reward curve with one point per iteration — and
// really ran the EP paths (the trainer reports its ranks; rollout logs name their group).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "up/local_cluster.h"

namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(moerl_up, a_short_grpo_run_on_expert_parallel_ranks_loses_nothing_and_learns_a_curve) {
  const fs::path dir = fs::temp_directory_path() / ("moerl-job-up-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto port = moerl::up::free_tcp_port();
  ASSERT_TRUE(port.ok()) << port.err().to_string();
  const int iterations = 20;
  const fs::path report = dir / "report.json";
  const std::string cmd = std::string(MOERL_BINARY) + " up --no-interrupt --iterations " +
                          std::to_string(iterations) +
                          " --timeout 240 --console tcp://127.0.0.1:" + std::to_string(*port) +
                          " --run-dir " + (dir / "runs").string() + " --report " + report.string() +
                          " --set store.url=" + (dir / "store").string() +
                          " --set job.rollout_ep_ranks=2 --set job.trainer_ep_ranks=2" +
                          // Each rollout node its own in-process EP group (moerl up's default
                          // is one rollout group across the two nodes).
                          " --set rollout.group_size=1 > " + (dir / "up.out").string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  ASSERT_EQ(rc, 0) << "moerl up failed:\n" << read_all(dir / "up.out");

  auto j = nlohmann::json::parse(read_all(report), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << "report is not JSON";
  ASSERT_TRUE(j.contains("accounting")) << j.dump(2);
  EXPECT_EQ(j["accounting"].value("lost", 1ul), 0u);
  EXPECT_EQ(j["accounting"].value("duplicated", 1ul), 0u);
  ASSERT_TRUE(j.contains("reward_curve"));
  // One point per trained version; the run may end (and the report be taken) before the
  // trainer's figures for the very last version reach the coordinator, as in the
  // single-rank path, so the last point may be missing.
  const auto& curve = j["reward_curve"];
  EXPECT_GE(curve.size(), size_t(iterations - 1)) << curve.dump();
  EXPECT_LE(curve.size(), size_t(iterations)) << curve.dump();
  for (size_t i = 0; i < curve.size(); ++i) {
    EXPECT_TRUE(curve[i].contains("mean_reward"));
    EXPECT_EQ(curve[i].value("iteration", 0), int(i + 1));
  }
  EXPECT_TRUE(j.contains("provenance"));

  // The EP paths really ran: the trainer says so, and rollout logs name their groups.
  bool trainer_ep = false;
  for (const auto& n : j["nodes"])
    if (n.value("role", "") == "trainer" && n.contains("stats") && n["stats"].contains("job"))
      trainer_ep = n["stats"]["job"].value("trainer_ep_ranks", 0) == 2;
  EXPECT_TRUE(trainer_ep) << "the trainer did not report 2 EP ranks";
  int rollout_groups = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir / "runs"))
    if (e.is_regular_file() &&
        read_all(e.path()).find("expert-parallel rollout group of 2 ranks ready") !=
            std::string::npos)
      ++rollout_groups;
  EXPECT_GT(rollout_groups, 0) << "no rollout log names an expert-parallel group";
  if (!HasFailure()) fs::remove_all(dir);
}

}  // namespace
