// What one simulated host (bench/fleet/sim_host.h) saw, written as JSON when it stops and read
// back by `moerl bench fleet`, which merges every host's record. Times are milliseconds on the
// steady clock (CLOCK_MONOTONIC), which every process on this machine shares, so the bench can
// line up the hosts' events with the moments it killed or noticed nodes.
//
// Threading: safe to call from any thread (every simulated node of a host records into one
// record from CAF's scheduler threads).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace moerl::bench {

// Milliseconds on the steady clock, comparable across the processes of this machine.
double fleet_now_ms();

// One lease of a unit (unit id, fencing attempt) seen at `t_ms`.
struct fleet_lease_event {
  double t_ms = 0;
  uint64_t unit = 0;
  uint32_t attempt = 0;
};

class fleet_record {
 public:
  // A granted lease request: its round trip, and every lease it carried.
  void lease_granted(double t_sent_ms, double t_reply_ms, const std::vector<fleet_lease_event>& l);
  // A refused or failed lease request, by what refused it ("not_found", "timeout", ...).
  void lease_refused(const std::string& why);
  // The coordinator accepted the unit's `finished` report, sent at t_sent_ms (its round trip
  // waits for the journal like a lease's: the same group commit).
  void unit_finished(double t_sent_ms, double t_ms);
  void unit_failed(const std::string& why);
  void samples_sent(uint64_t n);
  // Leases a node held when it was killed (pending again only once the coordinator notices).
  void orphaned(const std::vector<fleet_lease_event>& held);
  // A lease a draining node gave back; `t_ms` is when the coordinator's answer came (the unit
  // is pending again from then on), `t_notice_ms` when the node got its notice.
  void returned(double t_notice_ms, double t_ms, uint64_t unit, uint32_t attempt);
  // A node finished its drain: the record it sent the coordinator, plus when it got its
  // notice and when the coordinator recorded the drain.
  void drained(nlohmann::json record);
  void registered(bool ok);
  void heartbeat(bool ok);

  nlohmann::json to_json() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::vector<double>> lease_rtt_;   // [t_reply_ms, rtt_us, units]
  std::vector<std::vector<double>> report_rtt_;  // [t_reply_ms, rtt_us]
  std::vector<fleet_lease_event> grants_, orphans_;
  std::vector<std::vector<double>> returned_;       // [t_notice_ms, t_ms, unit, attempt]
  std::map<int64_t, uint64_t> finished_per_100ms_;  // steady 100 ms bin -> units finished
  std::map<std::string, uint64_t> refusals_, failures_;
  std::vector<nlohmann::json> drains_;
  uint64_t samples_ = 0, registered_ = 0, register_failed_ = 0, heartbeats_ = 0,
           heartbeat_errors_ = 0;
};

}  // namespace moerl::bench
