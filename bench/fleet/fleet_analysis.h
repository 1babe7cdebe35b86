// The figures of `moerl bench fleet`, computed from the hosts' records (fleet_record.h) once
// the run is over. Pure functions of their inputs (no clock, no I/O), so they are tested on
// hand-made records (tests/bench/fleet_analysis_test.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

namespace moerl::bench {

// Every host's record (fleet_record::to_json), concatenated.
struct fleet_merged {
  std::vector<std::vector<double>> lease_rtt;          // [t_reply_ms, rtt_us, units]
  std::vector<std::vector<double>> report_rtt;         // [t_reply_ms, rtt_us] (finished)
  std::vector<std::vector<double>> grants, orphans;    // [t_ms, unit, attempt]
  std::vector<std::vector<double>> returned;           // [t_notice_ms, t_ms, unit, attempt]
  std::vector<std::pair<int64_t, uint64_t>> finished;  // (100 ms bin, units), bins sorted
  nlohmann::json refusals = nlohmann::json::object(), failures = nlohmann::json::object();
  std::vector<nlohmann::json> drains;
  uint64_t samples_sent = 0, registered = 0, register_failed = 0, heartbeats = 0,
           heartbeat_errors = 0;
};
fleet_merged merge_fleet_records(const std::vector<nlohmann::json>& records);

// Lease round trips whose reply came in [from_ms, to_ms): latency_summary_us of them, plus
// units granted.
nlohmann::json lease_latency_in(const fleet_merged& m, double from_ms, double to_ms);

// Round trips of `finished` reports whose answer came in [from_ms, to_ms).
nlohmann::json report_latency_in(const fleet_merged& m, double from_ms, double to_ms);

// Units finished per second over [from_ms, to_ms), from the 100 ms bins.
double units_per_s_in(const fleet_merged& m, double from_ms, double to_ms);

// After a fault at `t_fault_ms` (until `t_end_ms`): the units/s of every `window_ms` window
// sliding by 100 ms, relative to `baseline_per_s`; the lowest one (the trough) and where it
// starts; and `recovered_s`, counted from the fault: the end of the first window from the
// trough on that is back at `ratio` x baseline (0 when no window fell below it; null when
// none came back before t_end_ms). Windows should span a few unit times: a fleet's units
// fall into step (a group commit answers every waiting report at once, and their next units
// then end together), so shorter windows see the waves, not the fault.
nlohmann::json throughput_recovery(const fleet_merged& m, double t_fault_ms, double t_end_ms,
                                   double baseline_per_s, double ratio, double window_ms);

// For every lease in `lost` (a killed node's, or one given back under a notice): how long
// after `t_fault_ms` the unit was leased again under a higher attempt (the first grant after
// its loss). n, p50/p99/max seconds, and how many were not leased again before `t_end_ms`.
nlohmann::json time_to_lease_again(const fleet_merged& m,
                                   const std::vector<std::vector<double>>& lost, double t_fault_ms,
                                   double t_end_ms);

}  // namespace moerl::bench
