// Private to moerl_actors: how many groups the trainer asks each buffer shard for, so that a
// step that wants N groups (trainer_step::num_groups_wanted) is asked for N in all and each
// shard for its share of them.
//
// Why: the coordinator leases an iteration's units to the shards round-robin, so each of S
// shards holds N/S of an iteration's groups. Asking every shard for ceil(wanted / S) whenever
// it had no request out (the rule before) asked for more than the step wanted: an odd
// remainder rounded up on both shards, and a shard that had answered was asked again while
// the other's request still covered the rest. The extra group came from the next iteration,
// so the step trained 17 of 16 and every later step needed a group of the iteration after
// it, which opens only once the step before is published: generation no longer overlapped
// training, the samples' staleness fell from 1 toward 0 and each iteration took training plus
// generation (the default `moerl up` ran 60+ ms an iteration instead of ~44).
//
// A shard whose share the iteration did not fill (a lost shard, a unit re-leased elsewhere)
// is asked for the rest like any other; when every share is asked and answered and the step
// still wants groups, they are split again over the shards present.
#pragma once

#if !defined(MOERL_INSIDE_moerl_actors)
#error "actors/internal/step_asks.h is private to moerl_actors (actors/)"
#endif

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace moerl::actors {

class step_asks {
 public:
  // `per_request`: the most groups one request may ask for (actors.trainer_batch_groups).
  explicit step_asks(uint32_t per_request) : per_request_(std::max<uint32_t>(per_request, 1)) {}

  // Groups to ask `shard` for now (0: none), given what the step still wants (0: any number,
  // each batch a step) and the shards present. Call for shards without a request out only;
  // record the ask with asked() when the request went out.
  uint32_t ask(const std::string& shard, uint64_t wanted, const std::vector<std::string>& shards) {
    if (wanted == 0 || shards.empty()) {
      share_.clear();  // no step size to split: every shard a whole request
      last_wanted_ = 0;
      return per_request_;
    }
    if (wanted > last_wanted_ || nothing_left_to_ask(wanted)) split(wanted, shards);
    last_wanted_ = wanted;
    auto it = share_.find(shard);
    if (it == share_.end()) return 0;
    return static_cast<uint32_t>(std::min<uint64_t>(it->second, per_request_));
  }

  // A request for `groups` went out to `shard`.
  void asked(const std::string& shard, uint32_t groups) {
    auto& s = share_[shard];
    s -= std::min<uint64_t>(s, groups);
    in_flight_[shard] = groups;
  }

  // `shard` answered its request with `groups` (fewer than asked: the rest is still its share).
  void answered(const std::string& shard, uint32_t groups) {
    auto it = in_flight_.find(shard);
    if (it == in_flight_.end()) return;
    if (groups < it->second && share_.count(shard)) share_[shard] += it->second - groups;
    in_flight_.erase(it);
  }

  // `shard` left (or its consumer was replaced): its request will never be answered.
  void forget(const std::string& shard) {
    in_flight_.erase(shard);
    share_.erase(shard);
  }

 private:
  uint32_t per_request_;
  uint64_t last_wanted_ = 0;
  uint64_t rotation_ = 0;                      // which shards get the remainder of an uneven split
  std::map<std::string, uint64_t> share_;      // groups of the step still to ask each shard for
  std::map<std::string, uint32_t> in_flight_;  // each shard's request out, in groups

  uint64_t asked_not_answered() const {
    uint64_t n = 0;
    for (const auto& [s, g] : in_flight_) n += g;
    return n;
  }
  bool nothing_left_to_ask(uint64_t wanted) const {
    uint64_t left = 0;
    for (const auto& [s, g] : share_) left += g;
    return left == 0 && asked_not_answered() < wanted;
  }
  // A new step (or an exhausted split): what the step wants beyond the requests out, split
  // evenly over the shards, the remainder to the next ones in turn.
  void split(uint64_t wanted, const std::vector<std::string>& shards) {
    const uint64_t out = asked_not_answered();
    const uint64_t to_ask = wanted > out ? wanted - out : 0;
    const uint64_t n = shards.size(), base = to_ask / n, extra = to_ask % n;
    share_.clear();
    for (uint64_t i = 0; i < n; ++i)
      share_[shards[i]] = base + (((i + n - rotation_ % n) % n) < extra ? 1 : 0);
    ++rotation_;
  }
};

}  // namespace moerl::actors
