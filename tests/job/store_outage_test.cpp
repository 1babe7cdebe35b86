// The store made unreachable mid-run (issue 27): a trainer group of two members writes its
// checkpoint shards (job/shard_checkpointer.h) to S3, moto's server in its own process. The
// server is frozen (SIGSTOP: connections open, nothing answers, as a store behind a dead
// link) after version 3 is committed. The step loop runs on up to job.max_durability_lag
// versions past the newest commit, then waits and says why (the store's refusal); the server
// thawed (SIGCONT), the shards are written again, the checkpoints catch up in order and the
// loop goes on. Nothing is lost: every version's checkpoint is committed with both members'
// shards, byte for byte.
#include <signal.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <thread>

#include "common/config.h"
#include "job/shard_checkpointer.h"
#include "moto_server.h"
#include "store/object_store.h"

namespace moerl::job {
namespace {

constexpr uint64_t kLag = 2;
constexpr uint64_t kVersions = 8;

std::vector<store::checkpoint_part> shard_of(uint32_t member, uint64_t v) {
  const std::string who = "member " + std::to_string(member) + ", version " + std::to_string(v);
  return {{"rank-" + std::to_string(member) + "/params", "params of " + who},
          {"rank-" + std::to_string(member) + "/adam", "moments of " + who}};
}

template <typename F>
void wait_until(F done) {  // a liveness bound only: the asserts say what did not happen
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!done() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

TEST(store_outage, the_run_throttles_at_the_lag_says_why_and_catches_up_with_nothing_lost) {
  MOERL_SKIP_TEST_WITHOUT_MOTO();
  auto server = store::testing::moto_server::start(
      std::string(MOERL_STORE_TEST_DIR) + "/moto_s3_server.py", 120000);
  ASSERT_TRUE(server.ok()) << server.err().to_string();
  const auto& info = (*server)->info();
  store::testing::export_credentials(info);
  config cfg = config::defaults();
  for (auto [k, v] : std::map<std::string, std::string>{{"store.s3_endpoint", info.endpoint},
                                                        {"store.s3_region", info.region},
                                                        // a frozen server: each try ends soon
                                                        {"store.s3_timeout_ms", "1000"},
                                                        {"store.s3_max_retries", "0"}})
    ASSERT_TRUE(cfg.set(k, v, "test").ok()) << k;
  auto opened = store::open_store("s3://" + info.bucket + "/run", cfg);
  ASSERT_TRUE(opened.ok()) << opened.err().to_string();
  std::shared_ptr<store::object_store> s3(std::move(*opened));
  const pid_t moto = (*server)->pid();
  struct thaw {  // whatever fails below, the server is not left frozen
    pid_t pid;
    ~thaw() { ::kill(pid, SIGCONT); }
  } thaw_at_exit{moto};

  const std::string prefix = "checkpoints";
  shard_checkpointer zero(s3, prefix, 0, 2, kLag, 1), one(s3, prefix, 1, 2, kLag, 1);
  // One step of the group: each member queues its shard, member 0 may throttle.
  auto step = [&](uint64_t v) {
    one.submit(v, shard_of(1, v), nlohmann::json::object());
    zero.submit(v, shard_of(0, v), nlohmann::json{{"policy_version", v}});
    return zero.throttle(v);
  };
  for (uint64_t v = 1; v <= 3; ++v) ASSERT_TRUE(step(v).ok()) << v;
  wait_until([&] { return zero.durable() == 3; });
  ASSERT_EQ(zero.durable(), 3u);

  // A loaded host may have timed out a try before (retried, taken): the outage's own
  // refusals are the ones counted from here.
  const uint64_t refused_before = zero.num_store_failures() + one.num_store_failures();
  ASSERT_EQ(::kill(moto, SIGSTOP), 0);  // the store stops answering
  // Versions 4 and 5 are within the lag of commit 3: announced without waiting.
  for (uint64_t v = 4; v <= 3 + kLag; ++v) ASSERT_TRUE(step(v).ok()) << v;
  std::atomic<bool> stepped{false};
  status sixth = ok_status();
  std::thread stepper([&] {
    sixth = step(3 + kLag + 1);  // one past the lag: waits for the store
    stepped = true;
  });
  // The writes are refused (timeouts), retried, and the reason is there to say why.
  wait_until([&] {
    return zero.num_store_failures() + one.num_store_failures() >= refused_before + 4 &&
           !zero.store_failing().empty();
  });
  EXPECT_FALSE(stepped.load()) << "version 6 was announced with 3 versions not durable";
  EXPECT_EQ(zero.durable(), 3u);
  const std::string why = zero.store_failing();
  EXPECT_NE(why.find("policy version 4"), std::string::npos) << why;
  EXPECT_GE(zero.num_throttled(), 1u);

  ASSERT_EQ(::kill(moto, SIGCONT), 0);  // back online
  stepper.join();
  ASSERT_TRUE(sixth.ok()) << sixth.err().to_string();
  for (uint64_t v = 3 + kLag + 2; v <= kVersions; ++v) ASSERT_TRUE(step(v).ok()) << v;
  wait_until([&] { return zero.durable() == kVersions; });
  ASSERT_EQ(zero.durable(), kVersions);
  EXPECT_TRUE(zero.store_failing().empty()) << zero.store_failing();
  EXPECT_EQ(zero.num_failed() + one.num_failed(), 0u) << "a checkpoint write gave up";

  // Nothing lost: every version committed, each member's shard read back as written (by a
  // reader with the default timeout: the check must not depend on the host's load).
  config patient = cfg;
  ASSERT_TRUE(patient.set("store.s3_timeout_ms", "120000", "test").ok());
  ASSERT_TRUE(patient.set("store.s3_max_retries", "3", "test").ok());
  auto reader = store::open_store("s3://" + info.bucket + "/run", patient);
  ASSERT_TRUE(reader.ok()) << reader.err().to_string();
  for (uint64_t v = 1; v <= kVersions; ++v) {
    for (uint32_t member = 0; member < 2; ++member) {
      auto got = read_own_shard(**reader, prefix, v, member);
      ASSERT_TRUE(got.ok()) << "version " << v << " shard " << member << ": "
                            << got.err().to_string();
      std::map<std::string, std::string> have, want;
      for (const auto& p : got->second) have[p.name] = p.bytes;
      for (const auto& p : shard_of(member, v)) want[p.name] = p.bytes;
      EXPECT_EQ(have, want) << "version " << v << " shard " << member;
    }
  }
}

}  // namespace
}  // namespace moerl::job
