#include "actors/internal/job_history.h"

#include <algorithm>

namespace moerl::actors {

using nlohmann::json;

bool is_job_history_list(const std::string& pointer) {
  return std::any_of(std::begin(kJobHistoryLists), std::end(kJobHistoryLists),
                     [&](const char* p) { return pointer == p; });
}

void job_history_sender::strip_sent(json& job, const std::string& coordinator) {
  if (!job.is_object()) return;
  if (coordinator != coordinator_) {
    coordinator_ = coordinator;
    sent_.clear();  // a coordinator we have not sent to holds nothing of ours
  }
  json from = json::object();
  for (const char* path : kJobHistoryLists) {
    const json::json_pointer ptr(path);
    if (!job.contains(ptr) || !job[ptr].is_array()) continue;
    json& list = job[ptr];
    size_t& sent = sent_[path];
    // A list shorter than what was sent (a job restored from a checkpoint starts again):
    // send it whole.
    if (list.size() < sent) sent = 0;
    from[path] = sent;
    const size_t size = list.size();
    list.erase(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(sent));
    sent = size;
  }
  job["history_from"] = std::move(from);
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
