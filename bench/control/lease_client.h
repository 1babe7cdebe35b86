// The two lease paths the control bench drives, as a rollout worker would use them:
//   K = 1: (lease_atom, lease_request) -> one Cap'n Proto lease; handed back with
//          (report_atom, unit_report{returned}).
//   K > 1: (leases_atom, lease_request{max_units = K}) -> one lease batch of up to K
//          (a Cap'n Proto LeaseBatch); all handed back with one (giveback_atom, LeaseGiveBack).
// A "leased unit" in the bench is one unit that went through the ledger's lease (journaled
// `leased` record, own fencing attempt and deadline, attempt_opened event to its shard) and
// back (journaled `ended(returned)` record, attempt_fenced event). No samples are generated
// and nothing commits: the bench measures the control plane, not the work.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <caf/fwd.hpp>

namespace moerl::bench {

// One lease cycle's reply, decoded: (unit, attempt) of every lease granted; empty with
// `refusal` set when the coordinator refused (nothing pending, shard full, ...).
struct lease_grant {
  std::vector<std::pair<uint64_t, uint32_t>> leases;
  std::string refusal;
};

// Request bytes for one lease cycle of `k` units (the atom is chosen by k at send time).
std::string lease_request_bytes(const std::string& worker, uint32_t k);
// Decodes the coordinator's reply to a K=1 or K>1 lease request.
lease_grant decode_grant(const std::string& reply, uint32_t k);

// Sequential round trips from a blocking requester (one request in flight). Returns the
// microseconds of every lease request that was granted; every grant is handed back (not
// timed) so the queue never runs dry. `units` adds the units granted.
std::vector<double> timed_lease_round_trips(caf::scoped_actor& self, const caf::actor& coord,
                                            const std::string& worker, uint32_t k, int n,
                                            uint64_t& units, std::string& first_refusal);

// Event-based driver: `window` lease cycles of `k` units in flight until `until_ns`
// (steady clock); calls `granted(n)` for every grant. Returns the driver actor.
caf::actor spawn_lease_driver(caf::actor_system& sys, const caf::actor& coord,
                              const std::string& worker, uint32_t k, int window, int64_t until_ns,
                              std::function<void(uint64_t units)> granted);

}  // namespace moerl::bench
