// A trainer's per-iteration lists cross to the coordinator once each (actors/internal/
// job_history.h): the coordinator still holds them whole, a new coordinator gets them whole,
// and a job that starts its lists again (a restore) is sent whole.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/internal/job_history.h"

namespace moerl::actors {
namespace {

using nlohmann::json;

// The job's stats after `n` iterations, built as a job's stats() builds them: the
// per-iteration lists hold entries 1..n and the weight plane's per-version list `versions`
// entries (a flush publishes more versions than iterations, so that list grows at its own
// pace), each from `from` on.
json job_after(int n, int versions = -1, const history_cursor& from = {}) {
  std::vector<json> curve, timings, published;
  for (int i = 1; i <= n; ++i) {
    curve.push_back({{"iteration", i}, {"mean_reward", i / 100.0}});
    timings.push_back({{"iteration", i}, {"t_train", 0.01 * i}});
  }
  for (int v = 1; v <= (versions < 0 ? n : versions); ++v)
    published.push_back({{"version", v}, {"bytes", 1000 + v}});
  json out{{"policy_version", n}, {"weights", {{"durable_version", n}}}};
  put_history(out, "/reward_curve", curve, from);
  put_history(out, "/iterations", timings, from);
  put_history(out, "/weights/versions", published, from);
  return out;
}

// The stats with every list whole, as the coordinator should hold them.
json whole(int n, int versions = -1) {
  json j = job_after(n, versions);
  j.erase("history_from");
  return j;
}

// What a trainer sends to `coordinator` after `n` iterations.
json send(job_history_sender& sender, const std::string& coordinator, int n, int versions = -1) {
  json job = job_after(n, versions, sender.first_unsent(coordinator));
  sender.note_sent(job);
  return job;
}

// What the coordinator holds after receiving `job` as a node's stats on top of `held`.
json receive(const json& job, json held) {
  json incoming{{"batches", 1}, {"job", job}};
  merge_job_history(incoming, std::move(held));
  return incoming;
}

TEST(job_history, each_entry_crosses_once_and_the_coordinator_holds_the_whole_lists) {
  job_history_sender sender;
  json held;
  size_t sent_entries = 0;
  for (int n : {3, 3, 7, 12}) {
    json job = send(sender, "coordinator@1", n);
    sent_entries += job["reward_curve"].size();
    held = receive(job, std::move(held));
    EXPECT_EQ(held["job"], whole(n)) << "after " << n << " iterations";
    EXPECT_FALSE(held["job"].contains("history_from"));
  }
  EXPECT_EQ(sent_entries, 12u) << "every entry once";
}

TEST(job_history, only_the_unsent_tail_is_built) {
  job_history_sender sender;
  send(sender, "c", 5);
  const history_cursor& from = sender.first_unsent("c");
  EXPECT_EQ(from.at("/reward_curve"), 5u);
  json job = job_after(8, -1, from);
  EXPECT_EQ(job["reward_curve"].size(), 3u);
  EXPECT_EQ(job["reward_curve"][0]["iteration"], 6);
  EXPECT_EQ(job["history_from"]["/iterations"], 5);
}

TEST(job_history, a_new_coordinator_gets_everything_again) {
  job_history_sender sender;
  send(sender, "coordinator@1", 5);
  json first = send(sender, "coordinator@1", 8);
  EXPECT_EQ(first["reward_curve"].size(), 3u);
  json again = send(sender, "coordinator@2", 9);  // a restarted coordinator process
  EXPECT_EQ(again["history_from"],
            (json{{"/reward_curve", 0}, {"/iterations", 0}, {"/weights/versions", 0}}));
  EXPECT_EQ(receive(again, json())["job"], whole(9));
}

TEST(job_history, lists_that_start_again_are_sent_whole_and_replace_what_was_held) {
  job_history_sender sender;
  json held = receive(send(sender, "c", 10), json());
  json restored = send(sender, "c", 2);  // a job restored from a checkpoint keeps fewer entries
  EXPECT_EQ(restored["history_from"]["/reward_curve"], 0);
  EXPECT_EQ(receive(restored, std::move(held))["job"], whole(2));
  EXPECT_EQ(send(sender, "c", 3)["reward_curve"].size(), 1u) << "and go on from there";
}

TEST(job_history, lists_growing_at_their_own_pace_each_cross_once) {
  job_history_sender sender;
  json held;
  size_t sent_versions = 0;
  for (auto [n, versions] : std::vector<std::pair<int, int>>{{2, 2}, {3, 5}, {3, 6}, {8, 11}}) {
    json job = send(sender, "c", n, versions);
    sent_versions += job["weights"]["versions"].size();
    EXPECT_EQ(job["weights"]["durable_version"], n) << "only the lists are cut";
    held = receive(job, std::move(held));
    EXPECT_EQ(held["job"], whole(n, versions)) << n << " iterations, " << versions;
  }
  EXPECT_EQ(sent_versions, 11u) << "every version's record once";
}

TEST(job_history, a_capped_list_still_sends_each_entry_once) {
  // A job keeping the newest 4 version records (list[0] is entry `dropped`): every record
  // still crosses once, and the coordinator holds them all.
  job_history_sender sender;
  json held;
  std::vector<json> kept;
  size_t dropped = 0, sent = 0;
  for (int v = 1; v <= 11; ++v) {
    kept.push_back({{"version", v}});
    if (kept.size() > 4) {
      kept.erase(kept.begin());
      ++dropped;
    }
    if (v % 3 == 2 && v < 11) continue;  // some versions pass before the next stats message
    json job{{"weights", json::object()}};
    put_history(job, "/weights/versions", kept, sender.first_unsent("c"), dropped);
    sender.note_sent(job);
    sent += job["weights"]["versions"].size();
    held = receive(job, std::move(held));
  }
  EXPECT_EQ(sent, 11u);
  ASSERT_EQ(held["job"]["weights"]["versions"].size(), 11u);
  for (int v = 1; v <= 11; ++v) EXPECT_EQ(held["job"]["weights"]["versions"][v - 1]["version"], v);
}

TEST(job_history, stats_without_history_from_replace_what_was_held) {
  json held = receive(job_after(4), json());
  json plain{{"job", whole(1)}};
  merge_job_history(plain, std::move(held));
  EXPECT_EQ(plain["job"], whole(1));
}

// A job restored from checkpoint `step` and announced as version `as_version`, after `n`
// more iterations: its reward curve holds the checkpoint's 1..step and then its own, its
// timings and version records only its own (as grpo_job's restore() leaves them).
json restored_job(int step, int as_version, int n, const history_cursor& from = {}) {
  std::vector<json> curve, timings, published;
  for (int i = 1; i <= step; ++i) curve.push_back({{"iteration", i}, {"mean_reward", i / 100.0}});
  for (int i = as_version + 1; i <= as_version + n; ++i) {
    curve.push_back({{"iteration", i}, {"mean_reward", i / 100.0}});
    timings.push_back({{"iteration", i}, {"t_train", 0.01 * i}});
    published.push_back({{"version", i}, {"bytes", 1000 + i}});
  }
  json out{{"policy_version", as_version + n}};
  put_history(out, "/reward_curve", curve, from);
  put_history(out, "/iterations", timings, from);
  put_history(out, "/weights/versions", published, from);
  return out;
}

std::vector<int> keys(const json& list, const char* key) {
  std::vector<int> out;
  for (const auto& e : list) out.push_back(e.value(key, -1));
  return out;
}

std::vector<int> range(int first, int last) {
  std::vector<int> out;
  for (int i = first; i <= last; ++i) out.push_back(i);
  return out;
}

std::vector<int> concat(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(job_history, a_job_restored_in_the_same_process_keeps_the_history_before_its_restart) {
  // Trained to 10, restored from checkpoint 6 (lag 4: announced as 11), then 2 iterations.
  job_history_sender sender;
  json held = receive(send(sender, "c", 10), json());
  json restored = restored_job(6, 11, 2, sender.first_unsent("c"));
  sender.note_sent(restored);
  EXPECT_EQ(restored["history_from"]["/iterations"], 0) << "its lists started again";
  json job = receive(restored, std::move(held))["job"];
  EXPECT_EQ(keys(job["iterations"], "iteration"), concat(range(1, 10), range(12, 13)));
  EXPECT_EQ(keys(job["reward_curve"], "iteration"), concat(range(1, 6), range(12, 13)))
      << "the curve restored from the checkpoint replaces the held one from its start";
  EXPECT_EQ(keys(job["weights"]["versions"], "version"), concat(range(1, 10), range(12, 13)));
}

TEST(job_history, sends_after_a_restore_append_to_the_history_kept_before_it) {
  // As above, then the restored job goes on (its cursor is into its own restarted lists), and
  // is restored a second time: nothing held before either restore is lost.
  job_history_sender sender;
  json held = receive(send(sender, "c", 10), json());
  json restored = restored_job(6, 11, 2, sender.first_unsent("c"));
  sender.note_sent(restored);
  held = receive(restored, std::move(held));
  json later = restored_job(6, 11, 5, sender.first_unsent("c"));
  sender.note_sent(later);
  EXPECT_EQ(later["history_from"]["/iterations"], 2) << "only its new entries cross";
  held = receive(later, std::move(held));
  EXPECT_EQ(keys(held["job"]["iterations"], "iteration"), concat(range(1, 10), range(12, 16)));
  EXPECT_EQ(keys(held["job"]["weights"]["versions"], "version"),
            concat(range(1, 10), range(12, 16)));
  EXPECT_EQ(keys(held["job"]["reward_curve"], "iteration"), concat(range(1, 6), range(12, 16)));
  // A send with nothing new (no iteration since the last) keeps everything held.
  json same = restored_job(6, 11, 5, sender.first_unsent("c"));
  sender.note_sent(same);
  EXPECT_TRUE(same["iterations"].empty());
  held = receive(same, std::move(held));
  EXPECT_EQ(keys(held["job"]["iterations"], "iteration"), concat(range(1, 10), range(12, 16)));
  // Restored again, from checkpoint 14 (announced as 19), then 3 more.
  json again = restored_job(14, 19, 1, sender.first_unsent("c"));
  sender.note_sent(again);
  held = receive(again, std::move(held));
  json more = restored_job(14, 19, 3, sender.first_unsent("c"));
  sender.note_sent(more);
  held = receive(more, std::move(held));
  EXPECT_EQ(keys(held["job"]["iterations"], "iteration"),
            concat(concat(range(1, 10), range(12, 16)), range(20, 22)));
}

TEST(job_history, the_report_joins_a_recreated_trainers_history_to_its_predecessors) {
  const json dead = whole(10);                    // the trainer node that died at version 10
  const json recreated = restored_job(6, 11, 3);  // a new node, restored from checkpoint 6
  const json earliest = whole(4);                 // a trainer that died even earlier
  for (const auto& order : std::vector<std::vector<const json*>>{{&dead, &recreated, &earliest},
                                                                 {&recreated, &earliest, &dead}}) {
    size_t leader = 99;
    json job = joined_trainer_job(order, &leader);
    EXPECT_EQ(job["policy_version"], 14) << "the newest trainer's figures lead";
    ASSERT_LT(leader, order.size());
    EXPECT_EQ(order[leader], &recreated);
    EXPECT_EQ(keys(job["iterations"], "iteration"), concat(range(1, 10), range(12, 14)));
    EXPECT_EQ(keys(job["reward_curve"], "iteration"), concat(range(1, 6), range(12, 14)));
    EXPECT_EQ(keys(job["weights"]["versions"], "version"), concat(range(1, 10), range(12, 14)));
  }
  // A recreated trainer that has not trained yet: the predecessor's lists whole.
  json fresh{{"policy_version", 11}, {"iterations", json::array()}};
  json job = joined_trainer_job({&dead, &fresh, nullptr});
  EXPECT_EQ(keys(job["iterations"], "iteration"), range(1, 10));
  EXPECT_EQ(keys(job["reward_curve"], "iteration"), range(1, 10));
  EXPECT_EQ(joined_trainer_job({}), json::object());
}

}  // namespace
}  // namespace moerl::actors
