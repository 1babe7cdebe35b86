// `moerl bench weights --paths store_s3_netns` on a small version, so CI runs the S3 path
// between hosts end to end: moto on a network namespace's host 0, the version published by a
// process beside it, readers on hosts of their own reading it through shaped links, every
// reader count asked for either timed or skipped for --s3-max-inflight-bytes, with the reason.
// Structure only: speed is the benchmark's to report. Needs root (network namespaces) and moto.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "moto_server.h"
#include "sims/netns_link.h"
#include "tests/support/command_output.h"

#ifndef MOERL_BINARY
#error "MOERL_BINARY must name the moerl binary (tests/weights/CMakeLists.txt)"
#endif

namespace {

using nlohmann::json;

TEST(weights_bench_netns, TheS3PathReachesReadersOnOtherHosts) {
  const std::string why = moerl::sims::netns_link::unavailable_reason();
  if (!why.empty()) GTEST_SKIP() << "network namespaces unavailable: " << why;
  MOERL_SKIP_TEST_WITHOUT_MOTO();
  int rc = -1;
  // 3 readers x 1 MiB is over the 2.5 MiB limit: that combination is listed, not run.
  const std::string out = moerl::testing::command_output(
      std::string(MOERL_BINARY) +
          " bench weights --paths store_s3_netns --sizes 1048576 --readers 1,2,3 --reps 2"
          " --warmup 1 --netns-link-mbit 400 --s3-max-inflight-bytes 2621440 --json",
      &rc);
  ASSERT_EQ(rc, 0) << out;
  const json r = json::parse(out, nullptr, false);
  ASSERT_TRUE(r.is_object()) << out;

  ASSERT_EQ(r["paths"].size(), 2u) << r.dump();
  for (size_t i = 0; i < 2; ++i) {
    const json& p = r["paths"][i];
    EXPECT_EQ(p["path"], "store_s3_netns") << p.dump();
    EXPECT_EQ(p["transport"], "netns") << p.dump();
    EXPECT_EQ(p["readers"], int(i) + 1) << p.dump();
    EXPECT_EQ(p["version_bytes"], 1048576) << p.dump();
    EXPECT_EQ(p["deliver_s"]["samples"], 2) << p.dump();
    EXPECT_GT(p["deliver_s"]["p50"].get<double>(), 0) << p.dump();
    // Every reader's own time, each delivery: none after the last one's.
    EXPECT_EQ(p["reader_s"]["samples"], 2 * (int(i) + 1)) << p.dump();
    EXPECT_GT(p["reader_s"]["p50"].get<double>(), 0) << p.dump();
    EXPECT_LE(p["reader_s"]["max"].get<double>(), p["deliver_s"]["max"].get<double>()) << p.dump();
    EXPECT_EQ(p["peer_bytes"], 0) << p.dump();  // every reader read the store itself
  }
  ASSERT_EQ(r["skipped"].size(), 1u) << r["skipped"].dump();
  EXPECT_EQ(r["skipped"][0]["path"], "store_s3_netns");
  EXPECT_EQ(r["skipped"][0]["readers"], 3);
  EXPECT_NE(r["skipped"][0]["why"].get<std::string>().find("--s3-max-inflight-bytes"),
            std::string::npos);
  // Published once, beside moto.
  ASSERT_EQ(r["publish"].size(), 1u) << r["publish"].dump();
  EXPECT_EQ(r["publish"][0]["path"], "store_s3_netns");
  EXPECT_GT(r["publish"][0]["publish_s"].get<double>(), 0);
}

}  // namespace
