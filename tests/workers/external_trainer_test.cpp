// The node side of the trainer's worker protocol (workers/PROTOCOL.md, "Trainer"): a batch
// handed, the worker's publish and checkpoint served from its files (read, then removed), every
// wrong request refused or failed by name while the session keeps serving, and a worker that
// dies or stays silent holding a batch failing that batch only (the next starts another).
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "workers/external_trainer.h"

namespace moerl::workers {
namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

struct seen {
  std::vector<std::string> published, checkpointed;
  int welcomes = 0;
};

std::string prefix_of(const char* test) {
  return "/tmp/moerl-ext-trainer-" + std::to_string(::getpid()) + "-" + test + ":";
}

std::unique_ptr<external_trainer> make(const std::string& behaviour, const std::string& prefix,
                                       seen& s, int64_t step_timeout_ms = 20000,
                                       std::shared_ptr<const std::atomic<bool>> abort = nullptr) {
  external_trainer_options o;
  o.group_abort = std::move(abort);
  if (o.group_abort) {  // a trainer group's rank 1 of 2
    o.rank = 1;
    o.world_size = 2;
  }
  o.worker = "exec:" + env_or("MOERL_PYTHON", "/usr/bin/python3") + " " +
             env_or("MOERL_TEST_WORKERS_DIR", ".") + "/fake_trainers.py " + behaviour;
  o.start_timeout_ms = 20000;
  o.restart_backoff_ms = 0;
  o.step_timeout_ms = step_timeout_ms;
  o.file_prefix = prefix;
  external_trainer_handlers h;
  h.publish = [&s](std::string bytes, const nlohmann::json&) -> result<nlohmann::json> {
    s.published.push_back(bytes);
    return nlohmann::json{{"version", s.published.size()}};
  };
  h.checkpoint = [&s](std::string bytes, const nlohmann::json&) -> result<nlohmann::json> {
    s.checkpointed.push_back(bytes);
    return nlohmann::json{{"version", 1}};
  };
  h.welcome = [&s, prefix] {
    ++s.welcomes;
    return nlohmann::json{{"version", 0}, {"file_prefix", prefix}};
  };
  auto t = external_trainer::create(o, h);
  EXPECT_TRUE(t.ok()) << t.err().to_string();
  return std::move(*t);
}

TEST(external_trainer, a_relative_file_prefix_or_a_bad_spec_is_a_config_error) {
  external_trainer_options o;
  o.worker = "python:m:f";
  o.file_prefix = "relative:";
  EXPECT_EQ(external_trainer::create(o, {}).err().code, errc::invalid_config);
  o.worker = "torch:thing";
  o.file_prefix = "/dev/shm/x:";
  EXPECT_EQ(external_trainer::create(o, {}).err().code, errc::invalid_config);
}

TEST(external_trainer, wrong_requests_are_refused_by_name_and_the_right_ones_served) {
  seen s;  // the fake writes its files under the prefix its welcome names: the node's
  const std::string prefix = prefix_of("misbehaves");
  auto t = make("misbehaves", prefix, s);
  auto wanted = t->hand(nlohmann::json::array({{{"group_id", 7}}}), false);
  ASSERT_TRUE(wanted.ok()) << wanted.err().to_string();
  EXPECT_EQ(*wanted, 0u);
  std::ifstream f(prefix + "answers.json");
  ASSERT_TRUE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  auto got = nlohmann::json::parse(ss.str());
  EXPECT_EQ(got["batch"]["groups"][0]["group_id"], 7);
  EXPECT_EQ(got["batch"]["flush"], false);
  const auto& a = got["answers"];
  EXPECT_EQ(a[0]["type"], "error");
  EXPECT_EQ(a[0]["reason"], "malformed");
  EXPECT_EQ(a[1]["type"], "request_failed");
  EXPECT_FALSE(got["short_left"].get<bool>());  // removed though refused
  EXPECT_EQ(a[2]["reason"], "unknown_type");
  EXPECT_EQ(a[3]["type"], "published");
  EXPECT_EQ(a[3]["version"], 1);
  EXPECT_EQ(a[4]["type"], "checkpointed");
  EXPECT_EQ(s.published, std::vector<std::string>{"weights!"});
  EXPECT_EQ(s.checkpointed, std::vector<std::string>{"state"});
  auto st = t->stats();
  EXPECT_EQ(st["refused_requests"], 2);
  EXPECT_EQ(st["failed_requests"], 1);
  EXPECT_EQ(st["publishes"], 1);
  EXPECT_EQ(st["checkpoints"], 1);
  t->stop(1000);
  ::unlink((prefix + "answers.json").c_str());
}

TEST(external_trainer, a_worker_that_dies_or_is_silent_holding_a_batch_fails_that_batch_only) {
  seen s;
  auto t = make("dies_holding", prefix_of("dies"), s);
  auto r = t->hand(nlohmann::json::array(), false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::peer_dead) << r.err().to_string();
  EXPECT_FALSE(t->running());
  r = t->hand(nlohmann::json::array(), false);  // a new worker, which dies the same way
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(t->stats()["worker_starts"], 2);
  EXPECT_EQ(s.welcomes, 2);

  seen q;
  auto silent = make("silent", prefix_of("silent"), q, 1500);
  r = silent->hand(nlohmann::json::array(), false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::timeout) << r.err().to_string();
  EXPECT_FALSE(silent->running());
}

TEST(external_trainer, a_group_member_refuses_next_and_publish_by_name_and_serves_its_shard) {
  seen s;
  const std::string prefix = prefix_of("member");
  auto abort = std::make_shared<std::atomic<bool>>(false);
  auto t = make("member", prefix, s, 20000, abort);
  // The member serves until its stop condition: here, once the fake wrote what it was answered.
  auto st = t->serve_member([&] { return ::access((prefix + "answers.json").c_str(), F_OK) == 0; });
  ASSERT_TRUE(st.ok()) << st.err().to_string();
  EXPECT_FALSE(t->running());  // stopped with the member
  std::ifstream f(prefix + "answers.json");
  ASSERT_TRUE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  auto got = nlohmann::json::parse(ss.str());
  const auto& a = got["answers"];
  EXPECT_EQ(a[0]["reason"], "unknown_type");
  EXPECT_NE(a[0]["detail"].get<std::string>().find("next from trainer rank 1 of 2"),
            std::string::npos)
      << a[0];
  EXPECT_EQ(a[1]["reason"], "unknown_type");
  EXPECT_NE(a[1]["detail"].get<std::string>().find("publish from trainer rank 1 of 2"),
            std::string::npos)
      << a[1];
  EXPECT_EQ(a[2]["type"], "checkpointed");
  EXPECT_TRUE(s.published.empty());
  EXPECT_EQ(s.checkpointed, std::vector<std::string>{"shard-1"});
  EXPECT_EQ(t->stats()["refused_requests"], 2);
  ::unlink((prefix + "answers.json").c_str());
  ::unlink((prefix + "v1").c_str());
}

TEST(external_trainer, a_broken_group_ends_a_members_serving_and_stops_its_worker) {
  seen s;
  auto abort = std::make_shared<std::atomic<bool>>(true);  // the group broke already
  auto t = make("member_waits", prefix_of("member-abort"), s, 20000, abort);
  auto st = t->serve_member([] { return false; });
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.err().code, errc::peer_dead);
  EXPECT_NE(st.err().message.find("the trainer group broke"), std::string::npos)
      << st.err().to_string();
  EXPECT_FALSE(t->running());
}

}  // namespace
}  // namespace moerl::workers
