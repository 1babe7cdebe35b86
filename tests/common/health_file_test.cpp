// The health file a node's probes read (common/health_file.h): written atomically and read
// back whole, malformed files named, and the live/ready verdicts on each state and age.
#include "common/health_file.h"

#include <fstream>

#include <gtest/gtest.h>

#include "tests/support/temp_dir.h"

namespace moerl {
namespace {

health_record running_at(int64_t now) {
  health_record r;
  r.node = "buffer-0";
  r.role = "buffer";
  r.pid = 42;
  r.state = "running";
  r.written_unix_ms = now;
  r.accepted_unix_ms = now;
  return r;
}

TEST(health_file, RoundTrips) {
  testing::temp_dir dir("health");
  const std::string path = dir.path() + "/h.json";
  auto r = running_at(1000);
  r.accepted_unix_ms = 900;
  ASSERT_TRUE(write_health(path, r));
  auto back = read_health(path);
  ASSERT_TRUE(back) << back.err().to_string();
  EXPECT_EQ(back->node, "buffer-0");
  EXPECT_EQ(back->role, "buffer");
  EXPECT_EQ(back->pid, 42);
  EXPECT_EQ(back->state, "running");
  EXPECT_EQ(back->written_unix_ms, 1000);
  EXPECT_EQ(back->accepted_unix_ms, 900);
  EXPECT_FALSE(std::ifstream(path + ".tmp")) << "the temporary is renamed away";
}

TEST(health_file, MissingAndMalformedFilesAreNamed) {
  testing::temp_dir dir("health");
  const std::string path = dir.path() + "/h.json";
  auto missing = read_health(path);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.err().code, errc::not_found);
  EXPECT_NE(missing.err().message.find(path), std::string::npos);
  for (const char* text : {"not json", "[1,2]", R"({"node":"x"})", R"({"node":1,"role":"b",
      "pid":1,"state":"running","written_unix_ms":1,"accepted_unix_ms":1})"}) {
    std::ofstream(path, std::ios::trunc) << text;
    auto bad = read_health(path);
    ASSERT_FALSE(bad) << text;
    EXPECT_EQ(bad.err().code, errc::invalid_argument) << text;
    EXPECT_NE(bad.err().message.find("health file " + path), std::string::npos) << text;
  }
}

TEST(health_file, LiveWhileTheAgentWritesAndIsNotFenced) {
  const int64_t now = 100000;
  EXPECT_EQ(probe_failure(running_at(now - 500), probe_kind::live, now, 1000), "");
  auto old = probe_failure(running_at(now - 1500), probe_kind::live, now, 1000);
  EXPECT_NE(old.find("frozen or hung"), std::string::npos) << old;
  auto fenced = running_at(now);
  fenced.state = "fenced";
  EXPECT_NE(probe_failure(fenced, probe_kind::live, now, 1000).find("fenced"), std::string::npos);
  auto joining = running_at(now);
  joining.state = "joining";
  joining.accepted_unix_ms = 0;
  EXPECT_EQ(probe_failure(joining, probe_kind::live, now, 1000), "") << "joining is alive";
}

TEST(health_file, ReadyOnlyWhileRunningAndAccepted) {
  const int64_t now = 100000;
  EXPECT_EQ(probe_failure(running_at(now), probe_kind::ready, now, 1000), "");
  for (const char* state : {"joining", "draining"}) {
    auto r = running_at(now);
    r.state = state;
    EXPECT_NE(probe_failure(r, probe_kind::ready, now, 1000).find(state), std::string::npos);
  }
  auto never = running_at(now);
  never.accepted_unix_ms = 0;
  EXPECT_NE(probe_failure(never, probe_kind::ready, now, 1000).find("not accepted"),
            std::string::npos);
  auto stale = running_at(now);
  stale.accepted_unix_ms = now - 5000;
  EXPECT_NE(probe_failure(stale, probe_kind::ready, now, 1000).find("last accepted"),
            std::string::npos);
}

}  // namespace
}  // namespace moerl
