#include "bench/fleet/fleet_record.h"

#include <chrono>
#include <cmath>

namespace moerl::bench {

using nlohmann::json;

double fleet_now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void fleet_record::lease_granted(double t_sent_ms, double t_reply_ms,
                                 const std::vector<fleet_lease_event>& l) {
  std::lock_guard<std::mutex> lk(mu_);
  lease_rtt_.push_back({t_reply_ms, (t_reply_ms - t_sent_ms) * 1e3, double(l.size())});
  grants_.insert(grants_.end(), l.begin(), l.end());
}

void fleet_record::lease_refused(const std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  ++refusals_[why];
}

void fleet_record::unit_finished(double t_sent_ms, double t_ms) {
  std::lock_guard<std::mutex> lk(mu_);
  report_rtt_.push_back({t_ms, (t_ms - t_sent_ms) * 1e3});
  ++finished_per_100ms_[static_cast<int64_t>(std::floor(t_ms / 100.0))];
}

void fleet_record::unit_failed(const std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  ++failures_[why];
}

void fleet_record::samples_sent(uint64_t n) {
  std::lock_guard<std::mutex> lk(mu_);
  samples_ += n;
}

void fleet_record::orphaned(const std::vector<fleet_lease_event>& held) {
  std::lock_guard<std::mutex> lk(mu_);
  orphans_.insert(orphans_.end(), held.begin(), held.end());
}

void fleet_record::returned(double t_notice_ms, double t_ms, uint64_t unit, uint32_t attempt) {
  std::lock_guard<std::mutex> lk(mu_);
  returned_.push_back({t_notice_ms, t_ms, double(unit), double(attempt)});
}

void fleet_record::drained(json record) {
  std::lock_guard<std::mutex> lk(mu_);
  drains_.push_back(std::move(record));
}

void fleet_record::registered(bool ok) {
  std::lock_guard<std::mutex> lk(mu_);
  ++(ok ? registered_ : register_failed_);
}

void fleet_record::heartbeat(bool ok) {
  std::lock_guard<std::mutex> lk(mu_);
  ++(ok ? heartbeats_ : heartbeat_errors_);
}

namespace {
json events_json(const std::vector<fleet_lease_event>& v) {
  json out = json::array();
  for (const auto& e : v) out.push_back({e.t_ms, e.unit, e.attempt});
  return out;
}
}  // namespace

json fleet_record::to_json() const {
  std::lock_guard<std::mutex> lk(mu_);
  json finished = json::array();
  for (const auto& [bin, n] : finished_per_100ms_) finished.push_back({bin, n});
  return {{"lease_rtt", lease_rtt_},
          {"report_rtt", report_rtt_},
          {"grants", events_json(grants_)},
          {"orphans", events_json(orphans_)},
          {"returned", returned_},
          {"finished_per_100ms", finished},
          {"refusals", refusals_},
          {"failures", failures_},
          {"drains", drains_},
          {"samples_sent", samples_},
          {"registered", registered_},
          {"register_failed", register_failed_},
          {"heartbeats", heartbeats_},
          {"heartbeat_errors", heartbeat_errors_}};
}

}  // namespace moerl::bench
