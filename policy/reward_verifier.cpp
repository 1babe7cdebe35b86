#include "policy/reward.h"

#include "common/status_try.h"

namespace moerl::policy {
namespace {

class verifier_reward final : public reward_model {
 public:
  explicit verifier_reward(const task& t) : task_(t) {}
  std::string kind() const override { return "verifier"; }
  result<double> score(const std::vector<token_id>& prompt,
                       const std::vector<token_id>& completion) const override {
    return task_.verify(prompt, completion);
  }

 private:
  const task& task_;
};

}  // namespace

std::unique_ptr<reward_model> make_verifier_reward(const task& t) {
  return std::make_unique<verifier_reward>(t);
}

result<std::unique_ptr<reward_model>> make_reward(const config& cfg, const task& t) {
  const std::string kind = cfg.get_string("task.reward");
  if (kind == "verifier") return make_verifier_reward(t);
  if (kind == "learned") {
    const std::string path = cfg.get_string("task.reward_model_path");
    if (path.empty())
      return error{
          errc::invalid_config,
          "key 'task.reward_model_path': must name a checkpoint when task.reward is learned"};
    ASSIGN_OR_RETURN(auto m, learned_reward_model::load(t, path));
    return std::unique_ptr<reward_model>(std::move(m));
  }
  return error{errc::invalid_config, "key 'task.reward': '" + kind + "' is not verifier|learned"};
}

}  // namespace moerl::policy
