// What bounds one coordinator as a run goes on: its 100 ms tick walks the ledger's units.
// expire_due() looks for leases past their deadline among every unit, and the accounting
// invariant (checked every tick) recounts every unit; both visit each unit the run ever
// created, not only those in flight, so the tick's cost grows with the run's length, and the
// coordinator (one actor) answers no lease meanwhile. This measures that cost on an
// in-memory ledger (no store) holding `num_units` units of which `num_leased` are leased:
// milliseconds per tick's worth of scans (median of `reps`).
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

namespace moerl::bench {

nlohmann::json ledger_tick_cost(uint64_t num_units, uint64_t num_leased, int reps);

}  // namespace moerl::bench
