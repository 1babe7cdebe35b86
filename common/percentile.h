// Order statistics for benchmark reports, one definition for every benchmark: nearest rank,
// so every reported percentile is a value that was measured (with 20 runs p99 is the slowest
// run, which is what a tail figure over so few samples honestly is).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace moerl {

// The nearest-rank `percent` percentile (0-100) of values sorted ascending; 0 when empty.
inline double nearest_rank_percentile(const std::vector<double>& sorted, double percent) {
  if (sorted.empty()) return 0;
  const auto rank =
      static_cast<size_t>(std::ceil(percent / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
}

// The same on unsorted values (sorts a copy).
inline double percentile_of(std::vector<double> values, double percent) {
  std::sort(values.begin(), values.end());
  return nearest_rank_percentile(values, percent);
}

}  // namespace moerl
