// Exact sample accounting, in sample slots: a lease of a unit dispatches
// groups x group_size slots, and every slot ends in exactly one bucket.
//   dispatched = committed + in_flight + sum(dropped)      (checked after every change)
//   committed  = trained + handed + buffered               (so committed - trained is explained)
//   lost = 0, duplicated = 0
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace moerl::ledger {

struct accounting {
  uint64_t dispatched = 0;  // slots handed to workers, summed over all attempts
  uint64_t committed = 0;   // slots whose samples are committed and still held or trained
  uint64_t in_flight = 0;   // slots of leases that are still open
  std::map<std::string, uint64_t> dropped;  // reason (ledger/types.h drop_reason) -> slots
  uint64_t lost = 0;        // slots the ledger can no longer place in any bucket; must be 0
  uint64_t duplicated = 0;  // samples handed to a trainer more than once; must be 0
  uint64_t trained = 0;     // committed samples a trainer confirmed (its step made a version)
  uint64_t handed = 0;      // committed samples served to a trainer, not confirmed yet
  // Samples a trainer asked to train and the ledger refused (their group was re-opened after
  // its shard was lost, or the trainer incarnation was fenced): extra copies, never trained,
  // outside the identity (their slots are already in dropped[shard_lost] or trained).
  uint64_t refused_claims = 0;

  // Committed samples a shard holds that no trainer has: committed - trained - handed.
  uint64_t buffered() const;

  uint64_t dropped_total() const;
  // The report's `accounting` object: {dispatched, committed, in_flight,
  // dropped: {reason: n}, lost, duplicated, trained, handed, buffered}, plus
  // refused_claims when it is not 0.
  nlohmann::json to_json() const;
  // errc::internal naming the broken equation when the invariant does not hold.
  status check() const;
};

}  // namespace moerl::ledger
