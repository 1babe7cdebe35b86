// The node side of the local worker protocol (workers/PROTOCOL.md) for a reward worker:
// every malformed message refused with its named reason while the node keeps serving; a
// raised exception, a dead, hung or misbehaving worker fail one score and never the scorer;
// the real moerl.worker SDK serving a Python function.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "workers/external_scorer.h"
#include "workers/worker_protocol.h"

namespace moerl::workers {
namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

std::string python() { return env_or("MOERL_PYTHON", "/usr/bin/python3"); }

std::string fake(const std::string& behaviour) {
  return "exec:" + python() + " " + env_or("MOERL_TEST_WORKERS_DIR", ".") + "/fake_workers.py " +
         behaviour;
}

std::unique_ptr<external_scorer> make(const std::string& worker, int64_t timeout_ms = 10000,
                                      int64_t start_timeout_ms = 10000) {
  external_scorer_options o;
  o.worker = worker;
  o.python = python();
  o.timeout_ms = timeout_ms;
  o.start_timeout_ms = start_timeout_ms;
  o.restart_backoff_ms = 0;
  auto s = external_scorer::create(o);
  EXPECT_TRUE(s.ok()) << s.err().to_string();
  return std::move(*s);
}

const std::vector<uint32_t> kPrompt{1, 15, 7, 4, 14};  // "^s41="
const std::vector<uint32_t> kRight{4, 7, 2};           // "14$"

TEST(external_scorer, a_worker_spec_that_is_neither_python_nor_exec_is_a_config_error) {
  for (const char* bad :
       {"torch:thing", "python:no_function", "python::f", "python:a b:f", "exec:", ""}) {
    external_scorer_options o;
    o.worker = bad;
    auto s = external_scorer::create(o);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.err().code, errc::invalid_config) << bad;
  }
}

TEST(external_scorer, a_python_function_scores_through_the_sdk) {
  auto s = make("python:worker_functions:sort_score");
  auto r = s->score(kPrompt, kRight, 3, 0);
  ASSERT_TRUE(r.ok()) << r.err().to_string();
  EXPECT_EQ(*r, 1.0f);
  r = s->score(kPrompt, {7, 4, 2}, 3, 1);  // only EOS in place
  ASSERT_TRUE(r.ok()) << r.err().to_string();
  EXPECT_FLOAT_EQ(*r, 1.0f / 3);
  EXPECT_EQ(s->stats()["scored"], 2);
  EXPECT_EQ(s->stats()["worker_starts"], 1);
}

TEST(external_scorer, an_exception_fails_that_sample_with_its_traceback_and_the_worker_serves_on) {
  auto s = make("python:worker_functions:raise_on_empty");
  auto r = s->score(kPrompt, {}, 9, 4);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::invalid_argument);
  EXPECT_NE(r.err().message.find("unit 9 seq 4"), std::string::npos) << r.err().message;
  EXPECT_NE(r.err().message.find("ZeroDivisionError"), std::string::npos) << r.err().message;
  EXPECT_NE(r.err().message.find("Traceback (most recent call last)"), std::string::npos);
  r = s->score(kPrompt, kRight, 9, 5);
  ASSERT_TRUE(r.ok()) << r.err().to_string();
  EXPECT_EQ(s->stats()["raised"], 1);
  EXPECT_EQ(s->stats()["worker_starts"], 1);  // the same process
}

TEST(external_scorer, a_function_returning_no_float_fails_that_sample_by_name) {
  auto s = make("python:worker_functions:returns_text");
  auto r = s->score(kPrompt, kRight, 1, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.err().message.find("score() returned 'good' (str); expected a float"),
            std::string::npos)
      << r.err().message;
}

// score_many: a rollout's message (a whole group) in one `score_batch` round trip through the
// SDK, one result per item in order; an exception fails only its item.
TEST(external_scorer, a_batch_is_scored_in_one_round_trip_and_an_exception_fails_only_its_item) {
  auto s = make("python:worker_functions:raise_on_empty");
  const std::vector<uint32_t> empty;
  const std::vector<uint32_t> one{7};
  auto r =
      s->score_many({{&kPrompt, &kRight, 5, 0}, {&kPrompt, &empty, 5, 1}, {&kPrompt, &one, 5, 2}});
  ASSERT_EQ(r.size(), 3u);
  ASSERT_TRUE(r[0].ok()) << r[0].err().to_string();
  EXPECT_FLOAT_EQ(*r[0], 1.0f / kRight.size());
  ASSERT_FALSE(r[1].ok());
  EXPECT_EQ(r[1].err().code, errc::invalid_argument);
  EXPECT_NE(r[1].err().message.find("unit 5 seq 1"), std::string::npos) << r[1].err().message;
  EXPECT_NE(r[1].err().message.find("ZeroDivisionError"), std::string::npos);
  ASSERT_TRUE(r[2].ok()) << r[2].err().to_string();
  EXPECT_FLOAT_EQ(*r[2], 1.0f);
  EXPECT_EQ(s->stats()["scored"], 2);
  EXPECT_EQ(s->stats()["raised"], 1);
  EXPECT_EQ(s->stats()["worker_starts"], 1);
}

// A batch reply of the wrong shape (too few results, a NaN reward) is refused by name and the
// right one is taken; a worker that hangs on a batch fails every item of it.
TEST(external_scorer, a_malformed_batch_reply_is_refused_and_a_hung_batch_fails_every_item) {
  auto s = make(fake("batch_garbage"));
  auto r = s->score_many({{&kPrompt, &kRight, 1, 0}, {&kPrompt, &kRight, 1, 1}});
  ASSERT_EQ(r.size(), 2u);
  ASSERT_TRUE(r[0].ok()) << r[0].err().to_string();
  ASSERT_TRUE(r[1].ok()) << r[1].err().to_string();
  EXPECT_EQ(*r[0], 11.0f);  // two refusals came back, both "malformed" (code 1)
  EXPECT_EQ(*r[1], 0.5f);
  EXPECT_EQ(s->stats()["refused_replies"], 2);

  auto h = make("python:worker_functions:hang_on_empty", 300);
  const std::vector<uint32_t> empty;
  auto t = h->score_many({{&kPrompt, &kRight, 2, 0}, {&kPrompt, &empty, 2, 1}});
  ASSERT_EQ(t.size(), 2u);
  for (const auto& x : t) {
    ASSERT_FALSE(x.ok());
    EXPECT_EQ(x.err().code, errc::timeout) << x.err().to_string();
  }
  EXPECT_EQ(h->stats()["timed_out"], 1);
}

TEST(external_scorer, every_malformed_reply_is_refused_by_name_and_the_right_one_is_taken) {
  auto s = make(fake("garbage"));
  auto r = s->score(kPrompt, kRight, 1, 0);
  ASSERT_TRUE(r.ok()) << r.err().to_string();
  // The fake worker encodes the refusals it got back, in order: not JSON, not an object, wrong
  // version, a type not accepted here, a wrong id, a string reward, a NaN reward.
  EXPECT_EQ(*r, 1123411.0f);
  EXPECT_EQ(s->stats()["refused_replies"], 7);
  EXPECT_EQ(s->stats()["scored"], 1);
}

TEST(external_scorer, a_worker_that_does_not_say_hello_right_is_not_served) {
  for (const char* b : {"wrong_role", "old_version", "exit_at_start"}) {
    auto s = make(fake(b));
    auto r = s->score(kPrompt, kRight, 1, 0);
    ASSERT_FALSE(r.ok()) << b;
    EXPECT_EQ(r.err().code, errc::peer_dead) << b;
    EXPECT_EQ(s->stats()["worker_deaths"], 1) << b;
  }
  auto s = make(fake("old_version"));
  auto r = s->score(kPrompt, kRight, 1, 0);
  EXPECT_NE(r.err().message.find("bad_version"), std::string::npos) << r.err().message;
  s = make(fake("exit_at_start"));
  r = s->score(kPrompt, kRight, 1, 0);
  EXPECT_NE(r.err().message.find("exit status 3"), std::string::npos) << r.err().message;
}

TEST(external_scorer, a_worker_silent_at_start_is_killed_at_the_start_timeout) {
  auto s = make(fake("silent"), 10000, 300);
  auto r = s->score(kPrompt, kRight, 1, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.err().message.find("no hello within worker.start_timeout_ms=300"), std::string::npos)
      << r.err().message;
}

TEST(external_scorer, a_hung_function_times_out_and_its_worker_is_replaced) {
  auto s = make("python:worker_functions:hang_on_empty", 500);
  auto r = s->score(kPrompt, {}, 2, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::timeout);
  r = s->score(kPrompt, kRight, 2, 1);
  ASSERT_TRUE(r.ok()) << r.err().to_string();
  EXPECT_EQ(s->stats()["timed_out"], 1);
  EXPECT_EQ(s->stats()["worker_starts"], 2);
}

TEST(external_scorer, a_worker_that_dies_mid_score_is_restarted_for_the_next_one) {
  auto s = make(fake("die_on_second"));
  ASSERT_TRUE(s->score(kPrompt, kRight, 1, 0).ok());
  auto r = s->score(kPrompt, kRight, 1, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::peer_dead);
  EXPECT_NE(r.err().message.find("exit status 5"), std::string::npos) << r.err().message;
  ASSERT_TRUE(s->score(kPrompt, kRight, 1, 2).ok());
  EXPECT_EQ(s->stats()["worker_starts"], 2);
  EXPECT_EQ(s->stats()["worker_deaths"], 1);
}

// A reward worker the "user" starts with MOERL_WORKER_SOCKET (not the node); returns its pid.
pid_t start_attached_worker(const std::string& path) {
  const std::string py = python();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("MOERL_WORKER_SOCKET", path.c_str(), 1);
    ::unsetenv("MOERL_WORKER_FD");
    ::execl(py.c_str(), py.c_str(), "-m", "moerl.worker", "reward", "worker_functions:sort_score",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// Scores until a worker is attached (its start takes a moment); the last result.
result<float> score_when_attached(external_scorer& s) {
  result<float> r = error(errc::peer_dead, "not tried");
  for (int i = 0; i < 60 && !r.ok(); ++i) r = s.score(kPrompt, kRight, 5, i);
  return r;
}

TEST(external_scorer, a_worker_the_user_started_attaches_and_a_new_one_takes_over_when_it_dies) {
  const std::string path = "/tmp/moerl-attach-test-" + std::to_string(::getpid()) + ".sock";
  auto s = make("attach:" + path);
  auto r = s->score(kPrompt, kRight, 5, 0);  // nobody attached yet
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.err().message.find("no worker attached at " + path), std::string::npos)
      << r.err().message;
  const pid_t first = start_attached_worker(path);
  r = score_when_attached(*s);
  ASSERT_TRUE(r.ok()) << r.err().to_string();
  EXPECT_EQ(*r, 1.0f);
  ::kill(first, SIGKILL);
  ::waitpid(first, nullptr, 0);
  r = s->score(kPrompt, kRight, 6, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::peer_dead);
  const pid_t second = start_attached_worker(path);
  r = score_when_attached(*s);
  ASSERT_TRUE(r.ok()) << r.err().to_string();
  s.reset();  // the node lets go: the attached worker sees end-of-stream and leaves by itself
  int st = 0;
  ASSERT_EQ(::waitpid(second, &st, 0), second);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  ::unlink(path.c_str());
}

TEST(external_scorer, an_attach_path_that_is_not_absolute_is_a_config_error) {
  external_scorer_options o;
  o.worker = "attach:relative.sock";
  auto s = external_scorer::create(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.err().message.find("expected attach:/ABSOLUTE/PATH"), std::string::npos);
}

}  // namespace
}  // namespace moerl::workers
