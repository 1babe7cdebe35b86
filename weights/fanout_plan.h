// Who a reader reads a version from (weights/FANOUT.md): a tree over the readers present,
// computed by every reader from the same sorted list, so no coordinator round decides it.
// Reader i (its index in the sorted, deduplicated list) reads from its parent
// (i - 1) / degree; the root (index 0) reads from the checkpoint caches. Each reader passes
// chunks on as they arrive (weights/arriving_version.h), so the tree is a pipeline: its
// depth is about log_degree(N) chunks, not N whole versions.
// When the parent dies or stalls the reader resumes from the parent's parent, and so on up
// to the root, then the caches: every ancestor is ahead of it in the same pipeline.
#pragma once

#include <string>
#include <vector>

namespace moerl::weights {

struct fanout_source {
  std::string endpoint;
  bool peer = false;  // another reader (bytes_from.peer) rather than a cache
};

// The index of reader `index`'s parent in a tree of the given degree (>= 1; 1 is a chain);
// -1 for the root.
int fanout_parent(int index, int degree);

// The holders `self` should try for a version, nearest first: its ancestors among `readers`
// (the endpoints of the readers present, in any order; self among them), then `caches`
// (rotated by self's index, so readers that fall back spread over them). When self is not
// among the readers, the caches alone.
std::vector<fanout_source> fanout_sources(std::vector<std::string> readers, const std::string& self,
                                          const std::vector<std::string>& caches, int degree);

}  // namespace moerl::weights
