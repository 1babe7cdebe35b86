#include "job/modpow_job.h"

#include <cstdio>
#include <map>

#include "actors/interruption.h"
#include "common/log.h"
#include "job/internal/trainer_check.h"
#include "job/modpow_work.h"

namespace moerl::job {
namespace {

// Verifies each batch: whole groups are dealt to the ranks (group j of the batch to rank
// j % num_ranks), each rank checks its share, and the totals are summed. The version is the
// number of iterations' worth of groups trained; its manifest names a running FNV-1a hash of
// every token trained, so two runs that trained different samples publish different hashes.
class modpow_trainer final : public actors::trainer_step {
 public:
  modpow_trainer(const config& cfg, actors::trainer_ranks& ranks)
      : ranks_(ranks),
        rounds_(static_cast<uint32_t>(cfg.get_int("actors.work_rounds"))),
        groups_per_iteration_(static_cast<uint64_t>(cfg.get_int("actors.units_per_iteration")) *
                              static_cast<uint64_t>(cfg.get_int("actors.groups_per_unit"))) {}

  result<actors::train_result> train(const std::vector<messages::sample>& samples) override {
    actors::train_result out;
    if (samples.empty()) return out;  // a flush: nothing is held back between batches
    const uint32_t n = ranks_.num_ranks();
    std::vector<std::vector<messages::sample>> shares(n);
    std::map<uint64_t, uint32_t> owner;
    for (const auto& s : samples) {
      auto it = owner.emplace(s.group_id, static_cast<uint32_t>(owner.size() % n)).first;
      shares[it->second].push_back(s);
      for (uint32_t t : s.tokens) content_hash_ = (content_hash_ ^ t) * 1099511628211ull;
    }
    std::vector<check_totals> totals(n);
    std::vector<std::function<void()>> work(n);
    for (uint32_t r = 0; r < n; ++r)
      work[r] = [&, r] { totals[r] = check_and_score(shares[r], rounds_); };
    if (auto st = ranks_.run_on_ranks(work); !st) return st.err();
    check_totals sum;
    for (const auto& t : totals) {
      sum.verified += t.verified;
      sum.bad += t.bad;
      sum.groups += t.groups;
      sum.sum_abs_advantage += t.sum_abs_advantage;
    }
    if (sum.bad) logger("trainer")->error("batch: {} sample(s) failed verification", sum.bad);
    out.groups = sum.groups;
    out.bad = sum.bad;
    out.sum_abs_advantage = sum.sum_abs_advantage;
    trained_groups_ += sum.groups;
    const uint64_t v = trained_groups_ / groups_per_iteration_;
    if (v > version_) {
      version_ = v;
      out.new_version = true;
      out.manifest.version = v;
      char hex[17];
      std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(content_hash_));
      out.manifest.content_hash = hex;
      out.manifest.created_unix_ms = static_cast<uint64_t>(actors::unix_now_ms());
    }
    return out;
  }
  uint64_t version() const override { return version_; }
  uint64_t num_held_groups() const override { return 0; }  // each batch is trained at once
  // No job figures beyond the runtime's own (samples_verified, samples_bad, ...).
  nlohmann::json stats(const actors::history_cursor&) const override {
    return nlohmann::json::object();
  }

 private:
  actors::trainer_ranks& ranks_;
  const uint32_t rounds_;
  const uint64_t groups_per_iteration_;
  uint64_t trained_groups_ = 0;
  uint64_t version_ = 0;
  uint64_t content_hash_ = 1469598103934665603ull;
};

class modpow_job final : public actors::job {
 public:
  explicit modpow_job(const config& cfg)
      : cfg_(cfg), rounds_(static_cast<uint32_t>(cfg.get_int("actors.work_rounds"))) {}

  std::string name() const override { return "modpow"; }
  result<std::vector<uint32_t>> prompt(uint64_t group_id) const override {
    return modpow_prompt(group_id, 0, rounds_);
  }
  result<std::unique_ptr<actors::rollout_work>> make_rollout_work() override {
    return std::unique_ptr<actors::rollout_work>(new modpow_work());
  }
  result<std::unique_ptr<actors::reward_function>> make_reward() override {
    return std::unique_ptr<actors::reward_function>(new modpow_reward());
  }
  result<std::unique_ptr<actors::trainer_step>> make_trainer(
      actors::trainer_ranks& ranks) override {
    return std::unique_ptr<actors::trainer_step>(new modpow_trainer(cfg_, ranks));
  }

 private:
  config cfg_;
  uint32_t rounds_;
};

}  // namespace

std::shared_ptr<actors::job> make_modpow_job(const config& cfg) {
  return std::make_shared<modpow_job>(cfg);
}

}  // namespace moerl::job
