#include "weights/fanout_plan.h"

#include <algorithm>

namespace moerl::weights {

int fanout_parent(int index, int degree) {
  if (index <= 0) return -1;
  return (index - 1) / std::max(degree, 1);
}

std::vector<fanout_source> fanout_sources(std::vector<std::string> readers, const std::string& self,
                                          const std::vector<std::string>& caches, int degree) {
  // Sorted and deduplicated: every reader must see the same list to agree on the tree.
  std::sort(readers.begin(), readers.end());
  readers.erase(std::unique(readers.begin(), readers.end()), readers.end());
  std::vector<fanout_source> out;
  const auto it = std::find(readers.begin(), readers.end(), self);
  const int index = it == readers.end() ? -1 : static_cast<int>(it - readers.begin());
  for (int a = fanout_parent(index, degree); a >= 0; a = fanout_parent(a, degree))
    out.push_back({readers[a], true});
  const size_t rotate = index < 0 || caches.empty() ? 0 : size_t(index) % caches.size();
  for (size_t k = 0; k < caches.size(); ++k)
    out.push_back({caches[(k + rotate) % caches.size()], false});
  return out;
}

}  // namespace moerl::weights
