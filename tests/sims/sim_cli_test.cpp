// The `moerl sim` command line contract: exit 0 for a valid scenario, 2 naming file, line and
// field for a bad one, 2 for a malformed --against, and a timeline that --seed changes.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <string>

namespace {

struct outcome {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

outcome run(const std::string& args) {
  outcome o;
  const std::string cmd = std::string(MOERL_BINARY) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return o;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) o.output.append(buf.data(), n);
  const int st = ::pclose(p);
  o.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return o;
}

const std::string kDir = MOERL_SCENARIO_DIR;

TEST(sim_cli, validate_accepts_every_shipped_scenario_in_both_forms) {
  for (const char* s : {"spot-storm", "hard-kills", "partition", "shard-loss",
                        "coordinator-restart", "mixed", "weights-loss"}) {
    for (const char* form : {"", " --short"}) {
      const auto o = run("sim validate " + kDir + "/" + s + ".yaml" + form);
      EXPECT_EQ(o.exit_code, 0) << s << form << ": " << o.output;
      EXPECT_NE(o.output.find("valid; scenario " + std::string(s)), std::string::npos) << o.output;
    }
  }
}

TEST(sim_cli, bad_scenario_exits_2_naming_file_line_and_field) {
  const std::string path = "/tmp/moerl-sim-cli-bad-" + std::to_string(::getpid()) + ".yaml";
  std::ofstream(path) << "name: bad\nduration_s: 30\nfaults:\n  - kind: sigterm\n    grace: 5\n";
  const auto o = run("sim validate " + path);
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find(path + ":5: faults[0].grace: unknown field"), std::string::npos)
      << o.output;
  const auto r = run("sim run " + path + " --short");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  std::remove(path.c_str());
  EXPECT_EQ(run("sim validate /nonexistent.yaml").exit_code, 2);
}

TEST(sim_cli, malformed_against_address_exits_2) {
  const auto o = run("sim run " + kDir + "/hard-kills.yaml --short --against nohostport");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("--against wants HOST:PORT"), std::string::npos) << o.output;
}

TEST(sim_cli, seed_flag_changes_the_json_timeline) {
  const auto a = run("sim validate " + kDir + "/hard-kills.yaml --json --seed 1");
  const auto b = run("sim validate " + kDir + "/hard-kills.yaml --json --seed 2");
  const auto a2 = run("sim validate " + kDir + "/hard-kills.yaml --json --seed 1");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(a.output, a2.output);
  EXPECT_NE(a.output, b.output);
  EXPECT_NE(a.output.find("\"timeline\""), std::string::npos);
}

}  // namespace
