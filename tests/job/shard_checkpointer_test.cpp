// A trainer's checkpoint shards in the background (job/shard_checkpointer.h), one process: a
// single shard commits on its own; the step loop goes on while up to job.max_durability_lag
// versions are not committed and is told (an error, never a silent announcement) when the
// store does not take them; member 0 commits only once the other shard is durable, and gives
// up at once when the group broke.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "common/config.h"
#include "job/grpo_job.h"
#include "job/shard_checkpointer.h"
#include "store/local_store.h"
#include "tests/support/temp_dir.h"

namespace moerl::job {
namespace {

// A store whose puts wait until opened (a slow store), or fail (an unreachable one).
class gated_store final : public store::object_store {
 public:
  explicit gated_store(std::shared_ptr<store::object_store> inner) : inner_(std::move(inner)) {}
  void open_gate() {
    std::lock_guard<std::mutex> g(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void fail_puts() {
    std::lock_guard<std::mutex> g(mu_);
    failing_ = open_ = true;
    cv_.notify_all();
  }
  void fill_up() {  // as a full disk answers: never an outage to wait out
    std::lock_guard<std::mutex> g(mu_);
    why_ = std::string("writing a part: ") + std::strerror(ENOSPC);
    failing_ = open_ = true;
    cv_.notify_all();
  }
  void heal() {
    std::lock_guard<std::mutex> g(mu_);
    failing_ = false;
    open_ = true;
    cv_.notify_all();
  }
  status put(const std::string& key, const std::string& bytes) override {
    std::unique_lock<std::mutex> g(mu_);
    cv_.wait(g, [&] { return open_; });
    if (failing_) return error{errc::io_error, why_};
    g.unlock();
    return inner_->put(key, bytes);
  }
  result<std::string> get(const std::string& key) const override { return inner_->get(key); }
  result<std::vector<std::string>> list(const std::string& prefix) const override {
    return inner_->list(prefix);
  }
  status remove(const std::string& key) override { return inner_->remove(key); }
  std::string describe() const override { return "gated " + inner_->describe(); }

 private:
  std::shared_ptr<store::object_store> inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false, failing_ = false;
  std::string why_ = "store unreachable (test)";
};

class shard_checkpointer_test : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::local_store::open(dir_.path(), true);
    ASSERT_TRUE(s.ok()) << s.err().to_string();
    store_ = std::shared_ptr<store::object_store>(std::move(*s));
  }
  static std::vector<store::checkpoint_part> state_of(uint64_t v) {
    return {{"rank-0/params", "params of version " + std::to_string(v)},
            {"rank-0/adam", "moments of version " + std::to_string(v)}};
  }
  ::moerl::testing::temp_dir dir_;
  std::shared_ptr<store::object_store> store_;
  const std::string prefix_ = "run/checkpoints";
};

TEST_F(shard_checkpointer_test, lag_zero_commits_every_version_before_it_is_announced) {
  shard_checkpointer ckpt(store_, prefix_, 0, 1, 0, 2);
  for (uint64_t v = 1; v <= 3; ++v) {
    ckpt.submit(v, state_of(v), {{"policy_version", v}});
    ASSERT_TRUE(ckpt.throttle(v).ok());
    EXPECT_EQ(ckpt.durable(), v);
  }
  EXPECT_EQ(ckpt.num_throttled(), 3u);  // lag 0: every version waits for its commit
  auto m = store::latest_committed(*store_, prefix_);
  ASSERT_TRUE(m.ok()) << m.err().to_string();
  EXPECT_EQ(m->step, 3u);
  EXPECT_EQ(m->meta["num_shards"], 1);
  // checkpoint_every 2: version 1 went when 2 was committed, 2 stays.
  EXPECT_FALSE(store::verify_checkpoint(*store_, prefix_, 1).ok());
  EXPECT_TRUE(store::verify_checkpoint(*store_, prefix_, 2).ok());
}

TEST_F(shard_checkpointer_test, the_step_loop_runs_ahead_up_to_the_lag_then_waits_for_the_store) {
  auto slow = std::make_shared<gated_store>(store_);
  shard_checkpointer ckpt(slow, prefix_, 0, 1, 2, 1);
  for (uint64_t v = 1; v <= 2; ++v) {
    ckpt.submit(v, state_of(v), nlohmann::json::object());
    ASSERT_TRUE(ckpt.throttle(v).ok());  // nothing is durable, and that is within the lag
  }
  EXPECT_EQ(ckpt.durable(), 0u);
  EXPECT_EQ(ckpt.num_throttled(), 0u);
  ckpt.submit(3, state_of(3), nlohmann::json::object());
  std::atomic<bool> returned{false};
  status waited = ok_status();
  std::thread announcer([&] {
    waited = ckpt.throttle(3);  // 3 > 0 + 2: waits until version 1 is committed
    returned = true;
  });
  // Open the gate only once the announcer waits: opened before it got there, the writer
  // committed versions 1 and 2 and throttle(3) had nothing to wait for (seen on a fresh machine).
  for (int i = 0; i < 10000 && ckpt.num_throttled() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(ckpt.num_throttled(), 1u);  // waiting: the gate is still shut, nothing committed
  EXPECT_FALSE(returned.load());
  slow->open_gate();
  announcer.join();
  ASSERT_TRUE(waited.ok()) << waited.err().to_string();
  EXPECT_GE(ckpt.durable(), 1u);
  EXPECT_EQ(ckpt.num_throttled(), 1u);
}

TEST_F(shard_checkpointer_test, a_store_down_past_the_patience_fails_the_version_beyond_the_lag) {
  auto down = std::make_shared<gated_store>(store_);
  down->fail_puts();
  shard_checkpointer ckpt(down, prefix_, 0, 1, 1, 1, nullptr, std::chrono::milliseconds(300));
  ckpt.submit(1, state_of(1), nlohmann::json::object());
  EXPECT_TRUE(ckpt.throttle(1).ok());
  ckpt.submit(2, state_of(2), nlohmann::json::object());
  auto st = ckpt.throttle(2);  // waits while the writes are retried, fails once they give up
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.err().code, errc::io_error);
  EXPECT_NE(st.err().message.find("did not take the checkpoints of policy versions 1..2"),
            std::string::npos)
      << st.err().message;
  EXPECT_EQ(ckpt.num_failed(), 2u);
  EXPECT_GE(ckpt.num_store_failures(), 2u);  // each write was tried more than once
}

// The store goes down mid-run and comes back: the step loop runs on up to the lag, then
// waits (saying why: the store's refusal), and once the store answers every version's
// checkpoint is written, in order, none skipped.
TEST_F(shard_checkpointer_test, a_store_that_comes_back_catches_up_with_nothing_skipped) {
  auto flaky = std::make_shared<gated_store>(store_);
  flaky->fail_puts();
  shard_checkpointer ckpt(flaky, prefix_, 0, 1, 2, 1);
  for (uint64_t v = 1; v <= 2; ++v) {
    ckpt.submit(v, state_of(v), nlohmann::json::object());
    ASSERT_TRUE(ckpt.throttle(v).ok());  // within the lag: no wait
  }
  ckpt.submit(3, state_of(3), nlohmann::json::object());
  std::atomic<bool> done{false};
  status waited = ok_status();
  std::thread stepper([&] {
    waited = ckpt.throttle(3);  // 3 > 0 + 2
    done = true;
  });
  // It waits for as long as the store refuses (however long the retries take).
  while (ckpt.num_store_failures() < 3 || ckpt.store_failing().empty())
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(done.load());
  EXPECT_NE(ckpt.store_failing().find("store unreachable (test)"), std::string::npos)
      << ckpt.store_failing();
  flaky->heal();
  stepper.join();
  ASSERT_TRUE(waited.ok()) << waited.err().to_string();
  for (uint64_t v = 4; v <= 5; ++v) {
    ckpt.submit(v, state_of(v), nlohmann::json::object());
    ASSERT_TRUE(ckpt.throttle(v).ok()) << v;
  }
  while (ckpt.durable() < 5) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(ckpt.num_failed(), 0u);  // no write gave up
  EXPECT_EQ(ckpt.num_written(), 5u);
  EXPECT_TRUE(ckpt.store_failing().empty());
  EXPECT_GE(ckpt.num_throttled(), 1u);  // 3 waited (4 and 5 may too, while it caught up)
  auto five = read_own_shard(*store_, prefix_, 5, 0);
  ASSERT_TRUE(five) << five.err().to_string();
  std::map<std::string, std::string> got, want;
  for (const auto& p : five->second) got[p.name] = p.bytes;
  for (const auto& p : state_of(5)) want[p.name] = p.bytes;
  EXPECT_EQ(got, want);
}

TEST_F(shard_checkpointer_test, member_zero_commits_once_the_other_shard_is_durable) {
  auto aborted = std::make_shared<std::atomic<bool>>(false);
  shard_checkpointer zero(store_, prefix_, 0, 2, 0, 1, aborted);
  shard_checkpointer one(store_, prefix_, 1, 2, 0, 1);
  zero.submit(1, state_of(1), nlohmann::json::object());
  one.submit(1, {{"rank-1/params", "p1"}, {"rank-1/adam", "a1"}}, nlohmann::json::object());
  ASSERT_TRUE(zero.throttle(1).ok());
  auto m = store::verify_checkpoint(*store_, prefix_, 1);
  ASSERT_TRUE(m.ok()) << m.err().to_string();
  EXPECT_EQ(m->parts.size(), 4u);
  // Version 2: member 1 never writes its shard and the group breaks: member 0 gives up.
  zero.submit(2, state_of(2), nlohmann::json::object());
  aborted->store(true);
  auto st = zero.throttle(2);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.err().code, errc::peer_dead);
  EXPECT_FALSE(store::verify_checkpoint(*store_, prefix_, 2).ok());
  EXPECT_EQ(store::latest_committed(*store_, prefix_)->step, 1u);
}

// A member other than 0 whose shard the store refuses for good (a full disk) says so at once,
// naming the shard and the store's error, so the group can break instead of member 0 waiting
// for the marker; a write that gave up because the group broke already says nothing.
TEST_F(shard_checkpointer_test,
       a_member_hears_of_its_shard_refused_for_good_unless_the_group_broke) {
  auto full = std::make_shared<gated_store>(store_);
  full->fill_up();
  // What member 1's checkpointer says of version v's shard (group_abort: the group's flag).
  auto refusals = [&](uint64_t v, std::shared_ptr<const std::atomic<bool>> group_abort) {
    std::mutex mu;
    std::vector<std::string> told;
    shard_checkpointer ckpt(full, prefix_, 1, 2, 0, 1, std::move(group_abort));
    ckpt.on_refused([&](const std::string& why) {
      std::lock_guard<std::mutex> g(mu);
      told.push_back(why);
    });
    ckpt.submit(v, state_of(v), nlohmann::json::object());
    ckpt.flush();
    EXPECT_EQ(ckpt.num_failed(), 1u);
    std::lock_guard<std::mutex> g(mu);
    return told;
  };
  auto told = refusals(1, nullptr);
  ASSERT_EQ(told.size(), 1u);
  EXPECT_NE(told[0].find("checkpoint shard 1 of policy version 1"), std::string::npos) << told[0];
  EXPECT_NE(told[0].find(std::strerror(ENOSPC)), std::string::npos) << told[0];
  told = refusals(2, std::make_shared<std::atomic<bool>>(true));
  EXPECT_TRUE(told.empty()) << told[0];
}

// job.checkpoint_interval: 0 follows the lag (half of it, at least 1); member 0 and the
// members pick the same versions; more than the lag is refused by the job, naming both keys.
TEST(checkpoint_interval, zero_is_half_the_lag_and_every_member_picks_the_same_versions) {
  EXPECT_EQ(checkpoint_interval(0, 4), 2u);
  EXPECT_EQ(checkpoint_interval(0, 9), 4u);
  EXPECT_EQ(checkpoint_interval(0, 1), 1u);
  EXPECT_EQ(checkpoint_interval(0, 0), 1u);
  EXPECT_EQ(checkpoint_interval(3, 4), 3u);
  std::vector<uint64_t> due;
  for (uint64_t v = 1; v <= 7; ++v)
    if (checkpoint_due(v, 2)) due.push_back(v);
  EXPECT_EQ(due, (std::vector<uint64_t>{2, 4, 6}));
  for (uint64_t v = 1; v <= 7; ++v) EXPECT_TRUE(checkpoint_due(v, 1)) << v;
}

TEST(checkpoint_interval, more_than_the_lag_is_refused_naming_both_keys) {
  moerl::testing::temp_dir dir{"ckpt-interval"};
  for (auto [interval, lag] : {std::pair<int, int>{2, 0}, std::pair<int, int>{5, 4}}) {
    auto cfg = config::load(
        "", {"store.url=" + dir.path(), "job.checkpoint_interval=" + std::to_string(interval),
             "job.max_durability_lag=" + std::to_string(lag)});
    ASSERT_TRUE(cfg.ok()) << cfg.err().to_string();
    auto job = make_job(*cfg, actors::node_role::trainer);
    ASSERT_FALSE(job.ok()) << interval << " over lag " << lag << " was accepted";
    EXPECT_EQ(job.err().code, errc::invalid_config);
    EXPECT_NE(job.err().message.find("job.checkpoint_interval " + std::to_string(interval)),
              std::string::npos)
        << job.err().message;
    EXPECT_NE(job.err().message.find("job.max_durability_lag"), std::string::npos);
  }
  auto fine = config::load("", {"store.url=" + dir.path(), "job.max_durability_lag=0"});
  ASSERT_TRUE(fine.ok());
  EXPECT_TRUE(make_job(*fine, actors::node_role::trainer).ok()) << "0 follows the lag";
}

}  // namespace
}  // namespace moerl::job
