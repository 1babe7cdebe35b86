// `moerl bench weights` on small versions, so CI runs the benchmark end to end (reader
// processes, cache over tcp and ipc, the local store, moto's S3 when installed): the report
// has every combination asked for, each with measured, positive times, beside memcpy, and
// provenance. Structure only: speed is the benchmark's to report, never a test's to assert.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/command_output.h"

#ifndef MOERL_BINARY
#error "MOERL_BINARY must name the moerl binary (tests/weights/CMakeLists.txt)"
#endif

namespace {

using nlohmann::json;

using moerl::testing::command_output;

TEST(weights_bench, SmallVersionsReachEveryReaderOnEveryPath) {
  int rc = -1;
  const std::string out =
      command_output(std::string(MOERL_BINARY) +
                         " bench weights --sizes 1048576,3000000 --readers 1,3 --reps 2"
                         " --warmup 1 --set weights.chunk_bytes=262144 --json",
                     &rc);
  ASSERT_EQ(rc, 0) << out;
  const json r = json::parse(out, nullptr, false);
  ASSERT_TRUE(r.is_object()) << out;
  EXPECT_EQ(r["benchmark"], "weights");
  EXPECT_GT(r["memcpy_gbps"].get<double>(), 0);
  EXPECT_TRUE(r["provenance"].contains("commit"));
  EXPECT_EQ(r["load_average"]["start"].size(), 3u);

  // Every path ran for every size and reader count, or says why it was skipped.
  const bool s3_skipped = !r["skipped"].empty();
  const size_t num_paths = s3_skipped ? 5 : 6;
  EXPECT_EQ(r["paths"].size(), num_paths * 2 * 2) << r["skipped"].dump();
  for (const auto& s : r["skipped"]) EXPECT_EQ(s["path"], "store_s3") << s.dump();
  for (const auto& p : r["paths"]) {
    EXPECT_EQ(p["deliver_s"]["samples"], 2) << p.dump();
    EXPECT_GT(p["deliver_s"]["p50"].get<double>(), 0) << p.dump();
    EXPECT_GE(p["deliver_s"]["p99"].get<double>(), p["deliver_s"]["p50"].get<double>());
    EXPECT_GT(p["aggregate_gbps"].get<double>(), 0) << p.dump();
    EXPECT_GT(p["ratio_to_memcpy"].get<double>(), 0) << p.dump();
    // Fan-out: with 3 readers two read from the root (every delivery); alone, none does.
    if (p["path"] == "fanout") {
      EXPECT_EQ(p["peer_bytes"].get<int64_t>() > 0, p["readers"].get<int>() > 1) << p.dump();
    }
  }
  for (const auto& p : r["publish"]) EXPECT_GT(p["publish_s"].get<double>(), 0) << p.dump();
}

// The push path (issue 27): a pusher process beside a cache process puts each version by
// ZeroMQ and by the fabric (stores into the cache's memfd: the same host), both timed.
TEST(weights_bench, AVersionIsPushedToACacheByZeroMqAndByTheFabric) {
  int rc = -1;
  const std::string out =
      command_output(std::string(MOERL_BINARY) +
                         " bench weights --paths push_host --sizes 1048576 --reps 2 --warmup 1"
                         " --set weights.chunk_bytes=262144 --json",
                     &rc);
  ASSERT_EQ(rc, 0) << out;
  const json r = json::parse(out, nullptr, false);
  ASSERT_TRUE(r.is_object()) << out;
  EXPECT_TRUE(r["paths"].empty());
  ASSERT_EQ(r["push"].size(), 2u) << r["push"].dump();
  EXPECT_EQ(r["push"][0]["transport"], "zmq");
  EXPECT_EQ(r["push"][1]["transport"], "fabric");
  for (const auto& p : r["push"]) {
    EXPECT_EQ(p["path"], "push_host") << p.dump();
    EXPECT_EQ(p["fabric_path"], "same_host") << p.dump();
    EXPECT_EQ(p["put_s"]["samples"], 2) << p.dump();
    EXPECT_GT(p["put_s"]["p50"].get<double>(), 0) << p.dump();
    EXPECT_GT(p["ratio_to_zmq"].get<double>(), 0) << p.dump();
  }
}

TEST(weights_bench, AnUnknownPathIsRefusedByName) {
  int rc = -1;
  const std::string out = command_output(
      std::string(MOERL_BINARY) + " bench weights --paths cache_tcp,carrier_pigeon 2>&1", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("unknown path 'carrier_pigeon'"), std::string::npos) << out;
}

}  // namespace
