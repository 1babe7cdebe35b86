// IMDSv2 against a local HTTP server that behaves like EC2's: token PUT required, 401 on a
// missing/wrong token, 404 while nothing is scheduled.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "actors/imds_poller.h"
#include "tests/actors/fake_imds.h"

using namespace moerl::actors;
using moerl::test::fake_imds;

namespace {
imds_options opts_for(const fake_imds& f) {
  imds_options o;
  o.endpoint = f.endpoint();
  o.poll_interval_ms = 20;
  o.request_timeout_ms = 2000;
  o.rebalance_grace_ms = 90000;
  return o;
}
}  // namespace

TEST(imds_client, nothing_scheduled_yields_no_notice_and_uses_a_token) {
  fake_imds f;
  imds_client c(opts_for(f));
  auto r = c.poll_once();
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_FALSE(*r);
  EXPECT_EQ(f.token_requests(), 1);
  EXPECT_EQ(f.unauthorized(), 0);
}

TEST(imds_client, spot_instance_action_becomes_a_notice_with_its_deadline) {
  fake_imds f;
  f.set_spot("terminate", "2030-01-02T03:04:05Z");
  imds_client c(opts_for(f));
  auto r = c.poll_once();
  ASSERT_TRUE(r && *r);
  EXPECT_EQ((*r)->source, moerl::messages::interruption_source::imds_spot);
  EXPECT_EQ((*r)->deadline_unix_ms, 1893553445000ull);
}

TEST(imds_client, rebalance_recommendation_gets_the_configured_grace) {
  fake_imds f;
  f.set_rebalance("2030-01-02T03:04:05Z");
  imds_client c(opts_for(f));
  auto r = c.poll_once();
  ASSERT_TRUE(r && *r);
  EXPECT_EQ((*r)->source, moerl::messages::interruption_source::imds_rebalance);
  auto grace =
      static_cast<int64_t>((*r)->deadline_unix_ms) - static_cast<int64_t>((*r)->issued_unix_ms);
  EXPECT_EQ(grace, 90000);
}

TEST(imds_client, expired_token_is_refreshed_once) {
  fake_imds f;
  imds_client c(opts_for(f));
  ASSERT_TRUE(c.poll_once());
  f.revoke_tokens();
  auto r = c.poll_once();
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(f.token_requests(), 2);
  EXPECT_GE(f.unauthorized(), 1);
}

TEST(imds_client, malformed_body_and_unreachable_endpoint_are_clear_errors) {
  fake_imds f;
  f.set_spot_body("{\"action\": \"terminate\"}");
  imds_client c(opts_for(f));
  auto r = c.poll_once();
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().message.find("'time'"), std::string::npos);
  imds_options dead;
  dead.endpoint = "http://127.0.0.1:1";
  dead.request_timeout_ms = 500;
  auto r2 = imds_client(dead).poll_once();
  ASSERT_FALSE(r2);
  EXPECT_NE(r2.err().message.find("/latest/api/token"), std::string::npos);
}

TEST(imds_poller, delivers_the_first_notice_once) {
  fake_imds f;
  std::mutex mu;
  std::condition_variable cv;
  int calls = 0;
  moerl::messages::interruption_notice got;
  {
    imds_poller p(opts_for(f), [&](const moerl::messages::interruption_notice& n) {
      std::lock_guard<std::mutex> g(mu);
      got = n;
      ++calls;
      cv.notify_all();
    });
    f.set_spot("stop", "2031-01-01T00:00:00Z");
    std::unique_lock<std::mutex> lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(20), [&] { return calls > 0; }));
  }
  EXPECT_EQ(calls, 1);
  EXPECT_NE(got.reason.find("stop"), std::string::npos);
}

TEST(imds_poller, keeps_watching_for_the_spot_notice_after_a_rebalance_recommendation) {
  fake_imds f;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<moerl::messages::interruption_notice> got;
  {
    imds_poller p(opts_for(f), [&](const moerl::messages::interruption_notice& n) {
      std::lock_guard<std::mutex> g(mu);
      got.push_back(n);
      cv.notify_all();
    });
    f.set_rebalance("2031-01-01T00:00:00Z");
    {
      std::unique_lock<std::mutex> lk(mu);
      ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(20), [&] { return got.size() >= 1; }));
    }
    // The recommendation stays published; only the Spot notice may come next.
    f.set_spot("terminate", "2031-01-01T00:02:00Z");
    std::unique_lock<std::mutex> lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(20), [&] { return got.size() >= 2; }));
  }
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].source, moerl::messages::interruption_source::imds_rebalance);
  EXPECT_NE(got[0].reason.find("rebalance"), std::string::npos);
  EXPECT_EQ(got[1].source, moerl::messages::interruption_source::imds_spot);
  EXPECT_EQ(got[1].deadline_unix_ms, 1924992120000u);
}
