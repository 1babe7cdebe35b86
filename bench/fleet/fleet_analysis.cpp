#include "bench/fleet/fleet_analysis.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "bench/support.h"
#include "common/percentile.h"

namespace moerl::bench {

using nlohmann::json;

namespace {
// r[key] when present, else an empty array: iterating a json temporary made by
// value(key, json::array()) trips GCC 12's -Wmaybe-uninitialized inside nlohmann.
const json& field(const json& r, const char* key) {
  static const json empty = json::array();
  auto it = r.find(key);
  return it == r.end() ? empty : *it;
}
}  // namespace

fleet_merged merge_fleet_records(const std::vector<json>& records) {
  fleet_merged m;
  std::map<int64_t, uint64_t> bins;
  auto append = [](std::vector<std::vector<double>>& to, const json& from) {
    for (const auto& e : from) to.push_back(e.get<std::vector<double>>());
  };
  for (const auto& r : records) {
    append(m.lease_rtt, field(r, "lease_rtt"));
    append(m.report_rtt, field(r, "report_rtt"));
    append(m.grants, field(r, "grants"));
    append(m.orphans, field(r, "orphans"));
    append(m.returned, field(r, "returned"));
    for (const auto& b : field(r, "finished_per_100ms"))
      bins[b[0].get<int64_t>()] += b[1].get<uint64_t>();
    for (auto& [k, v] : field(r, "refusals").items())
      m.refusals[k] = m.refusals.value(k, uint64_t{0}) + v.get<uint64_t>();
    for (auto& [k, v] : field(r, "failures").items())
      m.failures[k] = m.failures.value(k, uint64_t{0}) + v.get<uint64_t>();
    for (const auto& d : field(r, "drains")) m.drains.push_back(d);
    m.samples_sent += r.value("samples_sent", uint64_t{0});
    m.registered += r.value("registered", uint64_t{0});
    m.register_failed += r.value("register_failed", uint64_t{0});
    m.heartbeats += r.value("heartbeats", uint64_t{0});
    m.heartbeat_errors += r.value("heartbeat_errors", uint64_t{0});
  }
  m.finished.assign(bins.begin(), bins.end());
  auto by_time = [](const std::vector<double>& a, const std::vector<double>& b) {
    return a[0] < b[0];
  };
  std::sort(m.grants.begin(), m.grants.end(), by_time);
  return m;
}

json lease_latency_in(const fleet_merged& m, double from_ms, double to_ms) {
  std::vector<double> us;
  uint64_t units = 0;
  for (const auto& r : m.lease_rtt)
    if (r[0] >= from_ms && r[0] < to_ms) {
      us.push_back(r[1]);
      units += static_cast<uint64_t>(r[2]);
    }
  json out = latency_summary_us(std::move(us));
  out["units_granted"] = units;
  return out;
}

json report_latency_in(const fleet_merged& m, double from_ms, double to_ms) {
  std::vector<double> us;
  for (const auto& r : m.report_rtt)
    if (r[0] >= from_ms && r[0] < to_ms) us.push_back(r[1]);
  return latency_summary_us(std::move(us));
}

namespace {
// Units finished in the 100 ms bins that lie inside [from_ms, to_ms) (bins are whole).
uint64_t finished_in(const fleet_merged& m, double from_ms, double to_ms) {
  const int64_t first = static_cast<int64_t>(std::ceil(from_ms / 100.0));
  const int64_t end = static_cast<int64_t>(std::floor(to_ms / 100.0));
  uint64_t n = 0;
  for (const auto& [bin, count] : m.finished)
    if (bin >= first && bin < end) n += count;
  return n;
}
}  // namespace

double units_per_s_in(const fleet_merged& m, double from_ms, double to_ms) {
  const double whole_ms = (std::floor(to_ms / 100.0) - std::ceil(from_ms / 100.0)) * 100.0;
  return whole_ms > 0 ? double(finished_in(m, from_ms, to_ms)) * 1000.0 / whole_ms : 0.0;
}

json throughput_recovery(const fleet_merged& m, double t_fault_ms, double t_end_ms,
                         double baseline_per_s, double ratio, double window_ms) {
  std::vector<std::pair<double, double>> w;  // (start ms, ratio to the baseline)
  for (double start = t_fault_ms; start + window_ms <= t_end_ms; start += 100.0)
    w.emplace_back(start, baseline_per_s > 0
                              ? units_per_s_in(m, start, start + window_ms) / baseline_per_s
                              : 0.0);
  json windows = json::array();
  for (const auto& [start, r] : w)
    windows.push_back({std::round((start - t_fault_ms) / 100.0) / 10.0, r});
  json out{{"baseline_units_per_s", baseline_per_s},
           {"ratio_required", ratio},
           {"window_s", window_ms / 1000.0},
           {"windows_start_s_ratio", windows}};
  if (w.empty()) return out;
  // The trough is the fault's effect (it can come a unit time after the fault: the units the
  // victims held would have ended then); recovered is the end of the first window from the
  // trough on that is back at `ratio`; 0 when no window fell below it at all.
  auto trough = std::min_element(w.begin(), w.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
  out["lowest_ratio"] = trough->second;
  out["lowest_window_start_s"] = (trough->first - t_fault_ms) / 1000.0;
  if (trough->second >= ratio) {
    out["recovered_s"] = 0.0;
    return out;
  }
  out["recovered_s"] = nullptr;
  for (auto it = trough; it != w.end(); ++it)
    if (it->second >= ratio) {
      out["recovered_s"] = (it->first + window_ms - t_fault_ms) / 1000.0;
      break;
    }
  return out;
}

json time_to_lease_again(const fleet_merged& m, const std::vector<std::vector<double>>& lost,
                         double t_fault_ms, double t_end_ms) {
  std::vector<double> s;
  uint64_t never = 0;
  for (const auto& l : lost) {
    const double unit = l[1], attempt = l[2];
    double first = -1;
    for (const auto& g : m.grants)  // sorted by time: the first match is the earliest
      if (g[1] == unit && g[2] > attempt && g[0] >= t_fault_ms && g[0] < t_end_ms) {
        first = g[0];
        break;
      }
    if (first < 0)
      ++never;
    else
      s.push_back((first - t_fault_ms) / 1000.0);
  }
  std::sort(s.begin(), s.end());
  json out{{"n", s.size()}, {"not_leased_again", never}};
  if (!s.empty()) {
    out["p50_s"] = nearest_rank_percentile(s, 50);
    out["p99_s"] = nearest_rank_percentile(s, 99);
    out["max_s"] = s.back();
  }
  return out;
}

}  // namespace moerl::bench
