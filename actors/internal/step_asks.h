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
//
// The groups are not always spread evenly: after a failure the units a lost node held are
// generated again onto whichever shards the ledger picks, and a shard near its capacity is
// skipped for a while. An even split then asks a shard for a share it will not receive
// while the rest waits on another shard, step after step. So each step is split in the
// proportions the shards delivered the step before (evenly at first, and for a shard that
// joined since), less what each shard's request still out covers (a request left over from
// the step before is answered with this step's groups). When the requests out still bring
// nothing for a while the trainer calls stalled(): what the step wants is asked of the shards
// without a request out, though the requests out may then overfill the step by a group of the
// next iteration (the old rule, now only after a stall).
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
      return per_request_;
    }
    if (new_step_ || nothing_left_to_ask(wanted)) split(wanted, shards);
    new_step_ = false;
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
    delivered_[shard] += groups;
  }

  // The step trained on what it held: the next ask splits the next step, in the proportions
  // this one was delivered.
  void step_done() {
    if (!delivered_.empty()) weights_ = std::move(delivered_);
    delivered_.clear();
    new_step_ = true;
  }

  // The requests out brought nothing for a while: the step's `wanted` groups are split
  // again over `idle` (the shards without a request out), whatever those requests cover.
  void stalled(uint64_t wanted, const std::vector<std::string>& idle) {
    if (wanted == 0 || idle.empty()) return;
    share_.clear();
    for (const auto& [s, n] : split_over(wanted, idle, false)) share_[s] = n;
  }

  // `shard` left (or its consumer was replaced): its request will never be answered.
  void forget(const std::string& shard) {
    in_flight_.erase(shard);
    share_.erase(shard);
    weights_.erase(shard);
    delivered_.erase(shard);
  }

 private:
  uint32_t per_request_;
  bool new_step_ = true;
  uint64_t rotation_ = 0;                      // which shards get the remainder of an uneven split
  std::map<std::string, uint64_t> share_;      // groups of the step still to ask each shard for
  std::map<std::string, uint32_t> in_flight_;  // each shard's request out, in groups
  std::map<std::string, uint64_t> delivered_;  // groups each shard gave this step
  std::map<std::string, uint64_t> weights_;    // ... and the step before (how to split)

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
  // A new step (or an exhausted split): each shard's part of what the step wants, less its
  // request out, never more in all than the step wants beyond the requests out.
  void split(uint64_t wanted, const std::vector<std::string>& shards) {
    const uint64_t out = asked_not_answered();
    uint64_t budget = wanted > out ? wanted - out : 0;
    share_.clear();
    for (const auto& [s, part] : split_over(wanted, shards, true)) {
      auto f = in_flight_.find(s);
      const uint64_t covered = f == in_flight_.end() ? 0 : f->second;
      const uint64_t n = std::min(budget, part > covered ? part - covered : 0);
      share_[s] = n;
      budget -= n;
    }
  }
  // `to_ask` split over `shards`: by the last step's deliveries (`weighted`; a shard with no
  // record gets their mean), else evenly; the largest remainders get the groups left over,
  // ties going to the next shards in turn.
  std::vector<std::pair<std::string, uint64_t>> split_over(uint64_t to_ask,
                                                           const std::vector<std::string>& shards,
                                                           bool weighted) {
    const size_t n = shards.size();
    std::vector<double> w(n, 1.0);
    if (weighted && !weights_.empty()) {
      double sum = 0;
      for (const auto& [s, g] : weights_) sum += double(g);
      const double mean = sum / double(weights_.size());
      for (size_t i = 0; i < n; ++i) {
        auto it = weights_.find(shards[i]);
        w[i] = it != weights_.end() ? double(it->second) : mean;
      }
    }
    double total = 0;
    for (double x : w) total += x;
    if (total <= 0) std::fill(w.begin(), w.end(), 1.0), total = double(n);
    std::vector<uint64_t> got(n);
    std::vector<double> fraction(n);
    uint64_t given = 0;
    for (size_t i = 0; i < n; ++i) {
      const double exact = double(to_ask) * w[i] / total;
      got[i] = static_cast<uint64_t>(exact);
      fraction[i] = exact - double(got[i]);
      given += got[i];
    }
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = (i + rotation_) % n;  // ties: next shards in turn
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return fraction[a] > fraction[b]; });
    for (size_t k = 0; given < to_ask; k = (k + 1) % n, ++given) ++got[order[k]];
    ++rotation_;
    std::vector<std::pair<std::string, uint64_t>> out;
    for (size_t i = 0; i < n; ++i) out.emplace_back(shards[i], got[i]);
    return out;
  }
};

}  // namespace moerl::actors
