#include "actors/internal/job_history.h"

#include <algorithm>

namespace moerl::actors {

using nlohmann::json;

void put_history(json& stats, const char* pointer, const std::vector<json>& list,
                 const history_cursor& from, size_t dropped) {
  auto at = from.find(pointer);
  size_t first = at == from.end() ? 0 : at->second;
  if (first > dropped + list.size()) first = 0;  // the list started again (a restore): all of it
  first = std::max(first, dropped);              // what was dropped unsent is gone
  json tail = json::array();
  for (size_t i = first - dropped; i < list.size(); ++i) tail.push_back(list[i]);
  stats[json::json_pointer(pointer)] = std::move(tail);
  stats["history_from"][pointer] = first;
}

bool is_job_history_list(const std::string& pointer) {
  return std::any_of(std::begin(kJobHistoryLists), std::end(kJobHistoryLists),
                     [&](const char* p) { return pointer == p; });
}

const history_cursor& job_history_sender::first_unsent(const std::string& coordinator) {
  if (coordinator != coordinator_) {
    coordinator_ = coordinator;
    sent_.clear();  // a coordinator we have not sent to holds nothing of ours
  }
  return sent_;
}

void job_history_sender::note_sent(const json& job) {
  if (!job.is_object() || !job.contains("history_from")) return;
  for (const auto& [path, first] : job["history_from"].items()) {
    const json::json_pointer ptr(path);
    if (job.contains(ptr) && job[ptr].is_array())
      sent_[path] = first.get<size_t>() + job[ptr].size();
  }
}

namespace {

// An entry's place in its history list: its iteration, or (the per-version records) its version.
uint64_t history_key(const json& e) {
  if (!e.is_object()) return 0;
  for (const char* key : {"iteration", "version"})
    if (auto it = e.find(key); it != e.end() && it->is_number_integer() && *it >= 0)
      return it->get<uint64_t>();
  return 0;
}

// `later` with the entries of `earlier` (a previous incarnation's list of the same kind) that
// come before later's first put in front; all of earlier when later is empty. A list is in key
// order, so what earlier holds at or after later's first is its tail: trimmed from the back
// and later appended, the work is that of the new entries, not of the whole history (the
// coordinator merges on every stats message, and the history grows with the run).
void prepend_earlier(json& later, json&& earlier) {
  if (!earlier.is_array() || earlier.empty()) return;
  if (!later.is_array()) later = json::array();
  auto& kept = earlier.get_ref<json::array_t&>();
  if (!later.empty()) {
    const uint64_t first = history_key(later.front());
    while (!kept.empty() && history_key(kept.back()) >= first) kept.pop_back();
  }
  for (auto& e : later) kept.push_back(std::move(e));
  later = std::move(earlier);
}

}  // namespace

void merge_job_history(json& incoming, json&& held) {
  if (!incoming.is_object()) return;
  auto job = incoming.find("job");
  if (job == incoming.end() || !job->is_object() || !job->contains("history_from")) return;
  const json from = std::move((*job)["history_from"]);
  job->erase("history_from");
  json* held_job =
      held.is_object() && held.contains("job") && held["job"].is_object() ? &held["job"] : nullptr;
  for (const char* path : kJobHistoryLists) {
    const json::json_pointer ptr(path);
    if (!job->contains(ptr) || !(*job)[ptr].is_array()) continue;
    const size_t first = from.is_object() ? from.value(path, size_t{0}) : 0;
    json& fresh = (*job)[ptr];
    if (!held_job || !held_job->contains(ptr) || !(*held_job)[ptr].is_array()) continue;
    json& old = (*held_job)[ptr];
    // `first == 0`: the list started again (the job was restored from a checkpoint in this
    // process): what was held before the restored point stays, the rest is the restored job's.
    // Later sends: the held list is no longer the job's own, it keeps earlier incarnations'
    // entries in front of the job's restarted list, so `first` (an index into the job's list)
    // does not index it. Entries that carry their iteration or version are placed by it: what
    // is held before the first fresh entry stays, and a send with no new entries keeps all
    // that is held. (By index, every send after a restore kept only the held list's first
    // `first` entries: a re-formed group's earlier timings, or as many of its newest, vanished
    // from the report, 7 Dec.)
    if (first == 0 || fresh.empty() || history_key(fresh.front()) > 0) {
      prepend_earlier(fresh, std::move(old));
      continue;
    }
    // Entries without a key: keep what came before `first`; a gap (fewer held than `first`)
    // keeps what there is.
    auto& kept = old.get_ref<json::array_t&>();
    kept.resize(std::min(first, kept.size()));
    for (auto& e : fresh) kept.push_back(std::move(e));
    fresh = std::move(old);
  }
}

json joined_trainer_job(const std::vector<const json*>& jobs, size_t* leader) {
  const json* newest = nullptr;
  uint64_t newest_version = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const json* j = jobs[i];
    if (!j || !j->is_object()) continue;
    const uint64_t v = j->value("policy_version", uint64_t{0});
    if (!newest || v >= newest_version) {
      newest = j;
      newest_version = v;
      if (leader) *leader = i;
    }
  }
  if (!newest) return json::object();
  json out = *newest;
  // The earlier incarnations, newest first: each fills in before what is already there.
  std::vector<const json*> earlier;
  for (const json* j : jobs)
    if (j && j != newest && j->is_object()) earlier.push_back(j);
  std::stable_sort(earlier.begin(), earlier.end(), [](const json* a, const json* b) {
    return a->value("policy_version", uint64_t{0}) > b->value("policy_version", uint64_t{0});
  });
  for (const char* path : kJobHistoryLists) {
    const json::json_pointer ptr(path);
    for (const json* j : earlier)
      if (j->contains(ptr) && (*j)[ptr].is_array()) {
        json copy = (*j)[ptr];
        if (!out.contains(ptr)) out[ptr] = json::array();
        prepend_earlier(out[ptr], std::move(copy));
      }
  }
  return out;
}

}  // namespace moerl::actors
