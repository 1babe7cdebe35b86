// Environments in a user's process (workers/external_environment.h) through the real
// moerl.worker SDK: the guess task's environment written in Python (guess_env.py) answers
// every reset and step exactly as the C++ one (policy/tasks/guess.h), refusals included; an
// exception fails one step with its traceback; a dead worker takes its sessions with it.
#include <gtest/gtest.h>

#include <signal.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "policy/tasks/guess.h"
#include "workers/external_environment.h"

namespace moerl::workers {
namespace {

std::shared_ptr<env_host> make_host(int turns, int64_t timeout_ms = 10000) {
  ::setenv("MOERL_TEST_GUESS_TURNS", std::to_string(turns).c_str(), 1);  // the child inherits it
  env_host_options o;
  o.worker = "python:guess_env:make";
  const char* py = std::getenv("MOERL_PYTHON");
  o.python = py ? py : "/usr/bin/python3";
  o.timeout_ms = timeout_ms;
  o.restart_backoff_ms = 0;
  auto h = env_host::create(o);
  EXPECT_TRUE(h.ok()) << h.err().to_string();
  return *h;
}

std::vector<uint32_t> ids(const std::vector<policy::token_id>& v) {
  return std::vector<uint32_t>(v.begin(), v.end());
}

TEST(external_environment, the_python_guess_environment_answers_exactly_as_the_cpp_one) {
  // Action sequences: every single guess, a binary search, a forfeit, a refused token, a
  // refused empty action, and a step after the end.
  std::vector<std::vector<std::vector<uint32_t>>> plays;
  for (uint32_t d = 0; d < 10; ++d) plays.push_back({{3 + d}, {3 + 9 - d}, {3 + d}});
  plays.push_back({{3 + 4}, {3 + 7}, {3 + 1}, {3 + 8}, {3 + 2}, {3 + 0}});
  plays.push_back({{1}, {3}});
  plays.push_back({{99}, {}, {3 + 5}, {3 + 5}});
  uint64_t session = 1;
  int compared = 0;
  for (int turns : {1, 4, 9}) {
    auto host = make_host(turns);
    for (uint64_t seed = 0; seed < 10; ++seed) {
      for (const auto& play : plays) {
        policy::guess_env native;
        auto ext = make_external_environment(host, session++, "guess");
        auto a = native.reset(turns, seed);
        auto b = ext->reset(seed);
        ASSERT_TRUE(a.ok() && b.ok()) << (b.ok() ? "" : b.err().to_string());
        EXPECT_EQ(ids(a->observation), b->tokens);
        for (const auto& action : play) {
          auto x = native.step(std::vector<policy::token_id>(action.begin(), action.end()));
          auto y = ext->step(action);
          ASSERT_EQ(x.ok(), y.ok()) << "turns " << turns << " seed " << seed << " action "
                                    << (action.empty() ? -1 : int(action[0])) << ": "
                                    << (y.ok() ? x.err().to_string() : y.err().to_string());
          ++compared;
          if (!x.ok()) continue;
          EXPECT_EQ(ids(x->observation), y->tokens);
          EXPECT_EQ(static_cast<float>(x->reward), y->reward);
          EXPECT_EQ(x->done, y->done);
        }
      }
    }
    EXPECT_EQ(host->stats()["worker_starts"], 1);
  }
  EXPECT_GT(compared, 1000);
}

TEST(external_environment, an_exception_fails_that_step_with_its_traceback) {
  auto host = make_host(4);
  auto e = make_external_environment(host, 1, "guess");
  ASSERT_TRUE(e->reset(3).ok());
  auto r = e->step({3, 4});  // two tokens: the Python environment raises ValueError
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.err().message.find("ValueError: an action is one token of the vocabulary"),
            std::string::npos)
      << r.err().message;
  EXPECT_NE(r.err().message.find("Traceback (most recent call last)"), std::string::npos);
  auto ok = e->step({3 + 3});  // the episode goes on: found
  ASSERT_TRUE(ok.ok()) << ok.err().to_string();
  EXPECT_TRUE(ok->done);
  EXPECT_EQ(ok->reward, 1.0f);
  auto other = make_external_environment(host, 2, "sort");
  auto refused = other->reset(0);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.err().message.find("not 'sort'"), std::string::npos);
  EXPECT_EQ(host->stats()["raised"], 2);
  EXPECT_EQ(host->stats()["worker_starts"], 1);
}

TEST(external_environment, a_dead_worker_takes_its_sessions_and_a_new_one_serves_new_episodes) {
  auto host = make_host(4, 3000);
  auto e = make_external_environment(host, 1, "guess");
  ASSERT_TRUE(e->reset(5).ok());
  // Kill the process serving the session: the next step finds it dead.
  auto pid_of = [] {
    // The worker is this process's only child running moerl.worker env.
    FILE* f =
        ::popen(("pgrep -P " + std::to_string(::getpid()) + " -f 'moerl.worker env'").c_str(), "r");
    int pid = 0;
    if (f) {
      if (std::fscanf(f, "%d", &pid) != 1) pid = 0;
      ::pclose(f);
    }
    return pid;
  };
  const int pid = pid_of();
  ASSERT_GT(pid, 0);
  ::kill(pid, SIGKILL);
  auto r = e->step({3 + 5});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::peer_dead);
  auto again = e->step({3 + 5});  // a new process now, but not with this session
  ASSERT_FALSE(again.ok());
  auto fresh = make_external_environment(host, 2, "guess");
  ASSERT_TRUE(fresh->reset(5).ok());
  auto found = fresh->step({3 + 5});
  ASSERT_TRUE(found.ok()) << found.err().to_string();
  EXPECT_EQ(found->reward, 1.0f);
  EXPECT_EQ(host->stats()["worker_starts"], 2);
}

}  // namespace
}  // namespace moerl::workers
