// The node side of an external rollout worker (workers/rollout_session.h) against the real
// moerl.worker SDK (worker_functions.py): every sample checked against the lease and refused
// by name (stale fencing token, unknown unit, malformed, duplicate) before anything is
// delivered; the notice; a worker that dies mid-lease.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "workers/rollout_session.h"

namespace moerl::workers {
namespace {

std::unique_ptr<rollout_session> make(const std::string& fn) {
  rollout_session_options o;
  o.worker = "python:worker_functions:" + fn;
  const char* py = std::getenv("MOERL_PYTHON");
  o.python = py ? py : "/usr/bin/python3";
  o.restart_backoff_ms = 0;
  o.vocab_size = 16;
  o.max_completion_tokens = 8;
  auto s = rollout_session::create(o);
  EXPECT_TRUE(s.ok()) << s.err().to_string();
  return std::move(*s);
}

lease_offer offer(uint64_t unit, uint32_t attempt) {
  lease_offer l;
  l.unit = unit;
  l.attempt = attempt;
  l.policy_version = 3;
  l.group_size = 4;
  l.deadline_unix_ms = 1;
  l.groups = {{100, {1, 15, 4, 14}}, {101, {1, 15, 7, 14}}};
  return l;
}

// Runs the lease until the worker gives it back; returns the accepted samples and its reason.
std::pair<std::vector<accepted_sample>, std::string> run(rollout_session& s) {
  std::vector<accepted_sample> got;
  for (int i = 0; i < 200; ++i) {
    auto ev = s.next(100);
    EXPECT_TRUE(ev.ok()) << ev.err().to_string();
    if (!ev) break;
    if (ev->kind == rollout_event_kind::samples) {
      got.insert(got.end(), ev->samples.begin(), ev->samples.end());
      EXPECT_TRUE(s.ack(*ev).ok());
    } else if (ev->kind == rollout_event_kind::give_back) {
      return {got, ev->reason};
    }
  }
  return {got, "(no give_back)"};
}

TEST(rollout_session, every_bad_sample_is_refused_by_name_and_only_the_good_one_is_delivered) {
  auto s = make("rollout_probe");
  ASSERT_TRUE(s->offer(offer(7, 2)).ok());
  auto [samples, reason] = run(*s);
  EXPECT_EQ(reason,
            "stale_fencing_token,unknown_unit,malformed,malformed,malformed,malformed,duplicate");
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].group_index, 0u);
  EXPECT_EQ(samples[0].index_in_group, 0u);
  EXPECT_EQ(samples[0].tokens, (std::vector<uint32_t>{3, 2}));
  EXPECT_EQ(samples[0].logprobs, (std::vector<float>{-1.0f, -0.5f}));
  auto st = s->stats();
  EXPECT_EQ(st["samples_accepted"], 1);
  EXPECT_EQ(st["refused"]["stale_fencing_token"], 1);
  EXPECT_EQ(st["refused"]["unknown_unit"], 1);
  EXPECT_EQ(st["refused"]["malformed"], 4);
  EXPECT_EQ(st["refused"]["duplicate"], 1);
  ASSERT_TRUE(s->close("returned", "test").ok());

  // The next lease of the same unit (a new attempt): the old one's token is stale now, and
  // the notice sent before it reaches the worker.
  ASSERT_TRUE(s->notice(1796400000000, "drain").ok());
  ASSERT_TRUE(s->offer(offer(7, 3)).ok());
  auto [again, why] = run(*s);
  EXPECT_EQ(again.size(), 1u);
  EXPECT_EQ(why,
            "stale_fencing_token,unknown_unit,malformed,malformed,malformed,malformed,duplicate,"
            "notice 1796400000000 drain");
  EXPECT_EQ(s->stats()["worker_starts"], 1);
}

// `samples` (Lease.submit_group / submit_many): a whole group in one message, admitted whole
// and acknowledged once; a batch with one bad response (a duplicate inside it or of an earlier
// sample, an index out of range, a wrong fencing token, too many) is refused whole, naming the
// response, and nothing of it is delivered.
TEST(rollout_session, a_batch_is_admitted_whole_or_refused_whole) {
  auto s = make("rollout_batch_probe");
  ASSERT_TRUE(s->offer(offer(9, 1)).ok());
  auto [samples, reason] = run(*s);
  EXPECT_EQ(reason, "accepted,duplicate,duplicate,malformed,stale_fencing_token,malformed");
  ASSERT_EQ(samples.size(), 4u);  // the good group, nothing of the refused batches
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(samples[i].group_index, 1u);
    EXPECT_EQ(samples[i].index_in_group, i);
    EXPECT_EQ(samples[i].tokens, (std::vector<uint32_t>{i + 1}));
  }
  auto st = s->stats();
  EXPECT_EQ(st["samples_accepted"], 4);
  EXPECT_EQ(st["refused"]["duplicate"], 2);
  EXPECT_EQ(st["refused"]["malformed"], 2);
  EXPECT_EQ(st["refused"]["stale_fencing_token"], 1);
}

TEST(rollout_session, a_worker_that_dies_mid_lease_fails_it_and_the_next_offer_starts_a_new_one) {
  auto s = make("rollout_dies");
  ASSERT_TRUE(s->offer(offer(1, 1)).ok());
  result<rollout_event> ev = rollout_event{};
  for (int i = 0; i < 100 && ev.ok(); ++i) ev = s->next(100);
  ASSERT_FALSE(ev.ok());
  EXPECT_EQ(ev.err().code, errc::peer_dead);
  EXPECT_NE(ev.err().message.find("exit status 7"), std::string::npos) << ev.err().message;
  ASSERT_TRUE(s->close("failed", "worker died").ok());
  ASSERT_TRUE(s->offer(offer(2, 1)).ok());
  EXPECT_EQ(s->stats()["worker_starts"], 2);
  EXPECT_EQ(s->stats()["worker_deaths"], 1);
}

// A worker still starting asks for the lease's version a second or more after the offer, when
// newer versions may have pushed it out of every cache: the version's file is written before
// the lease goes out, and start() lets the caller pick the version once the worker runs.
TEST(rollout_session, the_lease_version_file_is_written_before_the_offer_reaches_the_worker) {
  rollout_session_options o;
  o.worker = "python:worker_functions:rollout_probe";
  const char* py = std::getenv("MOERL_PYTHON");
  o.python = py ? py : "/usr/bin/python3";
  std::vector<uint64_t> written;
  o.weights = [&](uint64_t v, bool) -> result<nlohmann::json> {
    written.push_back(v);
    return error(errc::not_found, "this test serves no bytes");
  };
  auto s = rollout_session::create(o);
  ASSERT_TRUE(s.ok()) << s.err().to_string();
  ASSERT_TRUE((*s)->start().ok());
  EXPECT_EQ((*s)->stats()["worker_starts"], 1);
  EXPECT_TRUE(written.empty());
  ASSERT_TRUE((*s)->offer(offer(9, 1)).ok());
  EXPECT_EQ(written, (std::vector<uint64_t>{3}));  // before any next(): at the offer
  EXPECT_EQ((*s)->stats()["worker_starts"], 1);    // start() had started it
  auto l = offer(10, 1);
  l.policy_version = 0;  // nothing published yet: nothing to write
  ASSERT_TRUE((*s)->close("returned", "test").ok());
  ASSERT_TRUE((*s)->offer(l).ok());
  EXPECT_EQ(written.size(), 1u);
}

// A rollout group's rank > 0 (python/WORKERS.md "Rollout groups"): its welcome carries its
// place; serve_member answers its weights for any version (its lease is rank 0's node's) and
// refuses its submissions by name; the worker's death ends serve_member, which never restarts it.
TEST(rollout_session, a_group_rank_above_0_is_served_weights_and_refused_submissions) {
  rollout_session_options o;
  const char* py = std::getenv("MOERL_PYTHON");
  const char* dir = std::getenv("MOERL_TEST_WORKERS_DIR");
  o.worker = std::string("exec:") + (py ? py : "/usr/bin/python3") + " " + (dir ? dir : ".") +
             "/fake_workers.py rollout_rank1";
  o.group = {
      {"rank", 1}, {"world_size", 2}, {"addr", "127.0.0.1"}, {"port", 1}, {"incarnation", 3}};
  std::vector<uint64_t> asked;
  o.weights = [&](uint64_t v, bool) -> result<nlohmann::json> {
    asked.push_back(v);
    return nlohmann::json{{"path", "/dev/null"}, {"bytes", 0}, {"sha256", ""}};
  };
  auto s = rollout_session::create(o);
  ASSERT_TRUE(s.ok()) << s.err().to_string();
  int polls = 0;  // 50 ms each: a 10 s bound
  auto st = (*s)->serve_member([&] { return asked.size() >= 2 || ++polls > 200; });
  EXPECT_TRUE(st.ok()) << st.err().to_string();
  EXPECT_EQ(asked, (std::vector<uint64_t>{5, 99}));
  auto stats = (*s)->stats();
  EXPECT_EQ(stats["refused"]["not_rank_zero"], 2);
  EXPECT_EQ(stats["weights_served"], 2);
  // The worker exits: serve_member says so, and does not start another.
  polls = 0;
  st = (*s)->serve_member([&] { return ++polls > 200; });
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.err().code, errc::peer_dead);
  EXPECT_EQ((*s)->starts(), 1u);
  EXPECT_FALSE((*s)->running());
}

TEST(rollout_session, a_rollout_spec_that_is_neither_python_nor_exec_is_a_config_error) {
  rollout_session_options o;
  o.worker = "vllm:serve";
  auto s = rollout_session::create(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.err().code, errc::invalid_config);
}

}  // namespace
}  // namespace moerl::workers
