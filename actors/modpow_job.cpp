#include "actors/job.h"
#include "actors/modpow_work.h"

namespace moerl::actors {
namespace {

class modpow_job final : public job {
 public:
  explicit modpow_job(const config& cfg)
      : rounds_(static_cast<uint32_t>(cfg.get_int("actors.work_rounds"))) {}

  std::string name() const override { return "modpow"; }
  result<std::vector<uint32_t>> prompt(uint64_t group_id) const override {
    return modpow_prompt(group_id, 0, rounds_);
  }
  result<std::unique_ptr<rollout_work>> make_rollout_work() override {
    return std::unique_ptr<rollout_work>(new modpow_work());
  }
  result<std::unique_ptr<reward_function>> make_reward() override {
    return std::unique_ptr<reward_function>(new modpow_reward());
  }
  result<std::unique_ptr<trainer_step>> make_trainer() override {
    return std::unique_ptr<trainer_step>();
  }

 private:
  uint32_t rounds_;
};

}  // namespace

std::shared_ptr<job> make_modpow_job(const config& cfg) { return std::make_shared<modpow_job>(cfg); }

}  // namespace moerl::actors
