#include "actors/internal/job_history.h"

#include <algorithm>

namespace moerl::actors {

using nlohmann::json;

void job_history_sender::strip_sent(json& job, const std::string& coordinator) {
  if (!job.is_object()) return;
  if (coordinator != coordinator_) {
    coordinator_ = coordinator;
    sent_ = 0;  // a coordinator we have not sent to holds nothing of ours
  }
  size_t longest = 0;
  for (const char* key : kJobHistoryKeys) {
    auto it = job.find(key);
    if (it == job.end() || !it->is_array()) continue;
    // A list shorter than what was sent (a job restored from a checkpoint starts again):
    // send it whole.
    if (it->size() < sent_) sent_ = 0;
  }
  for (const char* key : kJobHistoryKeys) {
    auto it = job.find(key);
    if (it == job.end() || !it->is_array()) continue;
    longest = std::max(longest, it->size());
    it->erase(it->begin(), it->begin() + static_cast<std::ptrdiff_t>(std::min(sent_, it->size())));
  }
  job["history_from"] = sent_;
  sent_ = std::max(sent_, longest);
}

void merge_job_history(json& incoming, json&& held) {
  if (!incoming.is_object()) return;
  auto job = incoming.find("job");
  if (job == incoming.end() || !job->is_object() || !job->contains("history_from")) return;
  const size_t from = job->value("history_from", size_t{0});
  job->erase("history_from");
  json* held_job =
      held.is_object() && held.contains("job") && held["job"].is_object() ? &held["job"] : nullptr;
  for (const char* key : kJobHistoryKeys) {
    auto it = job->find(key);
    if (it == job->end() || !it->is_array()) continue;
    json merged = json::array();
    if (held_job && held_job->contains(key) && (*held_job)[key].is_array()) {
      json& old = (*held_job)[key];
      // Keep what came before `from`; a gap (fewer held than `from`) keeps what there is.
      for (size_t i = 0; i < std::min(from, old.size()); ++i) merged.push_back(std::move(old[i]));
    }
    for (auto& e : *it) merged.push_back(std::move(e));
    *it = std::move(merged);
  }
}

}  // namespace moerl::actors
