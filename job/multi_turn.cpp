#include "job/multi_turn.h"

#include "policy/tasks/guess.h"

namespace moerl::job {
namespace {

using policy::token_id;

std::vector<token_id> to_tokens(const std::vector<uint32_t>& v) {
  return std::vector<token_id>(v.begin(), v.end());
}
std::vector<uint32_t> to_ids(const std::vector<token_id>& v) {
  return std::vector<uint32_t>(v.begin(), v.end());
}

class guess_environment final : public env::environment {
 public:
  guess_environment(int num_turns, std::shared_ptr<const prompt_dataset> dataset)
      : num_turns_(num_turns), dataset_(std::move(dataset)) {}
  result<env::env_observation> reset(uint64_t episode_seed) override {
    if (dataset_)
      return convert(env_.reset_hidden(num_turns_, dataset_->row_of(episode_seed).hidden));
    return convert(env_.reset(num_turns_, episode_seed));
  }
  result<env::env_observation> step(const std::vector<uint32_t>& action) override {
    for (uint32_t t : action)
      if (t >= uint32_t(policy::num_vocab))
        return error{errc::invalid_argument,
                     "guess: action token " + std::to_string(t) + " is outside the vocabulary"};
    return convert(env_.step(to_tokens(action)));
  }

 private:
  static result<env::env_observation> convert(result<policy::env_reply> r) {
    if (!r) return r.err();
    env::env_observation o;
    o.tokens = to_ids(r->observation);
    o.reward = static_cast<float>(r->reward);
    o.done = r->done;
    return o;
  }
  int num_turns_;
  std::shared_ptr<const prompt_dataset> dataset_;  // null: the hidden number from the seed
  policy::guess_env env_;
};

}  // namespace

std::unique_ptr<env::environment> make_guess_environment(
    int num_turns, std::shared_ptr<const prompt_dataset> dataset) {
  return std::make_unique<guess_environment>(num_turns, std::move(dataset));
}

result<episode_group> run_episodes(policy::moe_policy& policy, env::env_link& env,
                                   const episode_options& o, std::mt19937_64& rng) {
  const size_t g = static_cast<size_t>(o.group_size);
  auto first = env.reset(o.task, std::vector<uint64_t>(g, o.episode_seed));
  episode_group out;
  out.rows.resize(g);
  std::vector<std::vector<token_id>> context(g);
  std::vector<size_t> active;
  for (size_t i = 0; i < g; ++i) {
    if (!first[i]) {
      env.close_all();
      return error(first[i].err().code, "episode reset: " + first[i].err().message);
    }
    auto& row = out.rows[i];
    row.index_in_group = static_cast<uint32_t>(i);
    row.prompt = first[i]->tokens;
    row.rewarded = true;
    row.env_us = first[i]->latency_us;
    context[i] = to_tokens(first[i]->tokens);
    if (!first[i]->done) active.push_back(i);
  }
  for (int turn = 0; turn < o.max_turns && !active.empty(); ++turn) {
    // One batched generate when the contexts are as long as each other (replies of one
    // length, as guess's); generate needs that, so otherwise one row at a time.
    bool same_length = true;
    for (size_t i : active) same_length &= context[i].size() == context[active[0]].size();
    policy::generation gen_rows;
    for (size_t k = 0; k < active.size(); k += same_length ? active.size() : 1) {
      std::vector<std::vector<token_id>> rows;
      for (size_t m = k; m < (same_length ? active.size() : k + 1); ++m)
        rows.push_back(context[active[m]]);
      auto part = policy.generate(rows, 1, o.temperature, rng);
      if (!part) {
        env.close_all();
        return part.err();
      }
      for (auto& c : part->completions) gen_rows.completions.push_back(std::move(c));
      for (auto& l : part->logprobs) gen_rows.logprobs.push_back(std::move(l));
    }
    const policy::generation* gen = &gen_rows;
    std::vector<std::vector<uint32_t>> actions;
    for (size_t k = 0; k < active.size(); ++k) actions.push_back(to_ids(gen->completions[k]));
    auto replies = env.step(active, actions);
    std::vector<size_t> still;
    for (size_t k = 0; k < active.size(); ++k) {
      const size_t i = active[k];
      if (!replies[k]) {
        env.close_all();
        return error(replies[k].err().code, "episode " + std::to_string(i) + " turn " +
                                                std::to_string(turn + 1) + ": " +
                                                replies[k].err().message);
      }
      auto& row = out.rows[i];
      for (size_t j = 0; j < actions[k].size(); ++j) {
        row.tokens.push_back(actions[k][j]);
        row.logprobs.push_back(gen->logprobs[k][j]);
        row.from_env.push_back(0);
        context[i].push_back(gen->completions[k][j]);
      }
      for (uint32_t t : replies[k]->tokens) {
        row.tokens.push_back(t);
        row.logprobs.push_back(0.0f);  // not the policy's: never trained on
        row.from_env.push_back(1);
        context[i].push_back(static_cast<token_id>(t));
      }
      row.env_us += replies[k]->latency_us;
      ++row.env_steps;
      row.reward = replies[k]->reward;
      if (!replies[k]->done) still.push_back(i);
    }
    active = std::move(still);
  }
  env.close_all();  // episodes cut at max_turns keep the reward they had (0 for guess)
  return out;
}

}  // namespace moerl::job
