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
    json merged = json::array();
    if (held_job && held_job->contains(ptr) && (*held_job)[ptr].is_array()) {
      json& old = (*held_job)[ptr];
      // Keep what came before `first`; a gap (fewer held than `first`) keeps what there is.
      for (size_t i = 0; i < std::min(first, old.size()); ++i) merged.push_back(std::move(old[i]));
    }
    for (auto& e : fresh) merged.push_back(std::move(e));
    fresh = std::move(merged);
  }
}

}  // namespace moerl::actors
