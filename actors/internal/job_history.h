// A trainer's per-iteration lists (the job stats' "reward_curve" and "iterations") cross to the
// coordinator once each instead of whole with every stats message. Whole, they were ~400 KB
// of JSON by iteration 800 of the default run, sent after every policy version and parsed on
// the coordinator's one actor thread: time on the critical path that grew with the run
// (issue 27). The trainer sends the entries the coordinator has not had ("history_from" =
// the index of the first one sent) and everything again to a coordinator it has not sent to
// (a restarted one starts empty); the coordinator places them by iteration (or version) after
// what it holds before them, so the node's stats it keeps, and every view and report built on
// them, still hold whole lists.
#pragma once

#ifndef MOERL_INSIDE_moerl_actors
#error "actors/internal/job_history.h is private to moerl_actors (actors/)"
#endif

#include <cstddef>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "actors/job.h"

namespace moerl::actors {

// True when `pointer` (a JSON pointer into the job stats) names one of kJobHistoryLists.
bool is_job_history_list(const std::string& pointer);

// Trainer side; one per trainer actor.
class job_history_sender {
 public:
  // Where each history list's unsent entries start for `coordinator` (an identity that changes
  // when the coordinator process does: a new one holds nothing of ours, so everything is unsent).
  // Pass it to trainer_step::stats.
  const history_cursor& first_unsent(const std::string& coordinator);
  // Marks what `job` (stats built from first_unsent's cursor, its "history_from" saying where
  // each list starts) carries as sent. Call right before sending; assumes the send reaches it
  // (one link).
  void note_sent(const nlohmann::json& job);

 private:
  std::string coordinator_;
  history_cursor sent_;  // per list: entries the coordinator holds
};

// Coordinator side: `incoming` (a node's new stats; its "job" may carry "history_from") gets
// the history lists of `held` (that node's stats before, consumed) in front of its new
// entries. Stats without "history_from" are left as they are (they replace what was held).
void merge_job_history(nlohmann::json& incoming, nlohmann::json&& held);

}  // namespace moerl::actors
