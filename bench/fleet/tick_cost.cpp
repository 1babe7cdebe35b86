#include "bench/fleet/tick_cost.h"

#include <algorithm>

#include "bench/support.h"
#include "ledger/clock.h"
#include "ledger/work_ledger.h"

namespace moerl::bench {

nlohmann::json ledger_tick_cost(uint64_t num_units, uint64_t num_leased, int reps) {
  ledger::ledger_options lo;
  lo.group_size = 2;
  lo.max_groups_per_unit = 1;
  static ledger::steady_clock_source clock;
  auto led = need(ledger::work_ledger::open(lo, clock, nullptr), "in-memory ledger");
  need(led->add_shard("shard-0"), "shard");
  for (uint64_t u = 0; u < num_units; ++u) need(led->add_unit({u + 1}), "add_unit");
  for (uint64_t l = 0; l < std::min(num_leased, num_units); ++l)
    need(led->acquire("worker-" + std::to_string(l % 1000) + "/0"), "acquire");
  (void)led->take_events();
  std::vector<double> expire_ms, invariant_ms;
  for (int r = 0; r < reps; ++r) {
    auto t0 = bench_clock::now();
    auto ended = led->expire_due();  // none is due: the scan alone
    expire_ms.push_back(ms_since(t0));
    t0 = bench_clock::now();
    auto inv = led->check_invariant();
    invariant_ms.push_back(ms_since(t0));
    if (!ended.empty() || !inv) throw std::runtime_error("tick cost: the ledger changed under it");
  }
  std::sort(expire_ms.begin(), expire_ms.end());
  std::sort(invariant_ms.begin(), invariant_ms.end());
  const double e = nearest_rank_percentile(expire_ms, 50),
               i = nearest_rank_percentile(invariant_ms, 50);
  return {{"units", num_units},
          {"leased", std::min(num_leased, num_units)},
          {"expire_due_ms", e},
          {"check_invariant_ms", i},
          {"tick_scans_ms", e + i},
          {"share_of_one_core_at_10_ticks_per_s", (e + i) * 10.0 / 1000.0},
          {"reps", reps}};
}

}  // namespace moerl::bench
