#include "bench/kernels/timing.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "bench/support.h"
#include "common/percentile.h"

namespace moerl::bench {

timing time_runs(int warmup, int runs, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> us;
  us.reserve(runs);
  for (int i = 0; i < runs; ++i) {
    const auto start = bench_clock::now();
    fn();
    us.push_back(us_since(start));
  }
  return summarize(std::move(us));
}

std::vector<timing> time_interleaved(int warmup, int runs,
                                     const std::vector<std::function<void()>>& fns) {
  for (int i = 0; i < warmup; ++i)
    for (const auto& fn : fns) fn();
  std::vector<std::vector<double>> us(fns.size());
  for (auto& v : us) v.reserve(runs);
  for (int i = 0; i < runs; ++i)
    for (size_t f = 0; f < fns.size(); ++f) {
      const auto start = bench_clock::now();
      fns[f]();
      us[f].push_back(us_since(start));
    }
  std::vector<timing> out;
  for (auto& v : us) out.push_back(summarize(std::move(v)));
  return out;
}

timing summarize(std::vector<double> us) {
  timing t;
  t.us = std::move(us);
  std::vector<double> sorted = t.us;
  std::sort(sorted.begin(), sorted.end());
  t.p50_us = nearest_rank_percentile(sorted, 50);
  t.p99_us = nearest_rank_percentile(sorted, 99);
  t.min_us = sorted.empty() ? 0 : sorted.front();
  t.max_us = sorted.empty() ? 0 : sorted.back();
  return t;
}

nlohmann::json result_entry(const std::string& name, const nlohmann::json& shape, const timing& t,
                            double bytes, double flops) {
  nlohmann::json j;
  j["name"] = name;
  j["shape"] = shape;
  j["runs"] = t.us.size();
  j["p50_us"] = t.p50_us;
  j["p99_us"] = t.p99_us;
  j["min_us"] = t.min_us;
  j["max_us"] = t.max_us;
  j["bytes"] = bytes;
  j["gbps"] = t.p50_us > 0 ? bytes / (t.p50_us * 1e3) : 0.0;
  j["gflops"] = flops > 0 && t.p50_us > 0 ? nlohmann::json(flops / (t.p50_us * 1e3))
                                          : nlohmann::json(nullptr);
  return j;
}

}  // namespace moerl::bench
