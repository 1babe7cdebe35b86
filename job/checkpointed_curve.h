// A per-iteration list a checkpoint carries, so that a resumed run continues it: the reward curve,
// and the iterations' timings (a restored trainer's report then times the iterations before its
// restore too; they lived only on a coordinator, lost with it when it restarted). The curve grows
// by one entry a step and a checkpoint is written every few steps: carried whole in each
// checkpoint's manifest, its bytes over a run grew with the square of the run's length (~136 KB
// of JSON per manifest at 800 iterations, every other version). Instead the curve goes to the
// store in segments of kCurveSegmentEntries entries, each written once, named by its content
// and put before the first checkpoint that names it commits; a manifest carries the segments'
// keys and hashes and the entries after the last full segment.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "job/shard_checkpointer.h"
#include "store/object_store.h"

namespace moerl::job {

inline constexpr size_t kCurveSegmentEntries = 50;

class checkpointed_curve {
 public:
  // key_prefix: where segments go (the run's prefix; keys are whole store keys, so a run
  // resumed from another run's checkpoint reads that run's segments). name: the list's, which
  // names its manifest fields (NAME_segments, NAME_tail) and its segments' folder (NAME with
  // dashes for underscores).
  explicit checkpointed_curve(std::string key_prefix, std::string name = "reward_curve");

  // The manifest fields for `curve` ("reward_curve_segments", "reward_curve_tail"), and in
  // `to_write` the segments completed since the previous call: the caller puts them before
  // the commit of the checkpoint whose manifest carries these fields.
  nlohmann::json meta(const std::vector<nlohmann::json>& curve,
                      std::vector<named_object>* to_write);

  // The curve a committed checkpoint's meta describes (either layout: a manifest written
  // before segments carries "reward_curve" whole; one written before the list was carried has
  // none of its fields: empty). A segment that cannot be read or fails its
  // hash is left out with `warnings` naming it: the curve is the run's record, not training
  // state, so it never stops a resume; the segments are then written again from what was read.
  std::vector<nlohmann::json> restore(const store::object_store& store, const nlohmann::json& meta,
                                      std::vector<std::string>* warnings);

 private:
  std::string key_prefix_;
  std::string name_;    // the manifest fields' stem
  std::string folder_;  // the segments' keys: key_prefix_/folder_/...
  nlohmann::json segments_ = nlohmann::json::array();  // {"key","sha256","entries"} in order
  size_t covered_ = 0;  // curve entries the segments hold (the curve's first covered_)
};

}  // namespace moerl::job
