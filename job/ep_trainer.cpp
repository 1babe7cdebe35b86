#include "job/ep_trainer.h"

#include <algorithm>
#include <cmath>

#include "fabric/collectives.h"
#include "job/ep_policy_group.h"
#include "job/param_slicing.h"

namespace moerl::job {

struct ep_trainer::impl {
  policy::grpo_config grpo;
  policy::adam_config adam;
  float temperature = 1.0f;
  int64_t max_tokens_per_rank = 0;
  int max_seq_len = 0;
  std::unique_ptr<ep_policy_group> group;
  // What create() built the group from, to rebuild it after a failure.
  config cfg;
  policy::model_config rank_model;
  ep_group_shape shape;
  std::vector<std::pair<size_t, size_t>> dense;  // dense ranges of a rank's buffer
  size_t num_dense = 0;
  struct rank_state {
    std::unique_ptr<policy::adam> opt;
    std::vector<float> grads, reduce_buf;
  };
  std::vector<rank_state> ranks;
};

ep_trainer::ep_trainer(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
ep_trainer::~ep_trainer() = default;

result<std::unique_ptr<ep_trainer>> ep_trainer::create(const config& cfg,
                                                       const policy::model_config& model,
                                                       const policy::grpo_config& grpo,
                                                       const policy::adam_config& adam,
                                                       float temperature, int num_ranks,
                                                       int64_t max_samples_per_step) {
  if (grpo.kl_coef > 0)
    return error{errc::invalid_config,
                 "job.trainer_ep_ranks > 1 does not support grpo.kl_coef > 0 yet "
                 "(the frozen reference would need its own expert-parallel shares)"};
  auto p = std::make_unique<impl>();
  p->grpo = grpo;
  p->adam = adam;
  p->temperature = temperature;
  p->max_seq_len = model.max_seq_len;
  // Each rank runs at most its share of a step's samples, each at most max_seq_len tokens.
  p->max_tokens_per_rank = (max_samples_per_step + num_ranks - 1) / num_ranks * model.max_seq_len;
  policy::model_config rank_model = model;
  rank_model.aux_loss_coef = model.aux_loss_coef / float(num_ranks);
  ep_group_shape shape;
  shape.num_ranks = num_ranks;
  shape.max_train_tokens = p->max_tokens_per_rank;
  shape.dense_collectives = true;
  p->cfg = cfg;
  p->rank_model = rank_model;
  p->shape = shape;
  auto g = ep_policy_group::create(cfg, rank_model, shape);
  if (!g) return g.err();
  p->group = std::move(*g);
  auto d = dense_ranges(p->group->full_layout(), p->group->rank_layout(), num_ranks);
  if (!d) return d.err();
  p->dense = std::move(*d);
  for (const auto& r : p->dense) p->num_dense += r.second;
  p->ranks.resize(num_ranks);
  // Adam without its own clipping: step() clips by the global norm first.
  policy::adam_config unclipped = adam;
  unclipped.grad_clip = 0;
  for (auto& r : p->ranks)
    r.opt = std::make_unique<policy::adam>(unclipped, p->group->rank_layout().num_floats());
  return std::unique_ptr<ep_trainer>(new ep_trainer(std::move(p)));
}

result<ep_step_result> ep_trainer::step(const std::vector<policy::sample>& samples,
                                        const std::vector<double>& advantages) {
  impl& m = *impl_;
  if (m.group->broken()) {
    // The shares and moments live on this side of the rank threads: take them over.
    auto params = serialize();
    auto moments = serialize_adam();
    if (!params || !moments)
      return error{errc::internal, "trainer group broken and its state unreadable"};
    m.group.reset();
    auto g = ep_policy_group::create(m.cfg, m.rank_model, m.shape);
    if (!g) return error{g.err().code, "rebuilding the broken trainer group: " + g.err().message};
    m.group = std::move(*g);
    if (auto st = load(*params); !st) return st.err();
    if (auto st = load_adam(*moments); !st) return st.err();
  }
  const int n = m.group->num_ranks();
  const int64_t total = static_cast<int64_t>(samples.size());
  if (advantages.size() != samples.size())
    return error{errc::invalid_argument, "ep_trainer: one advantage per sample needed"};
  if (total < n)
    return error{errc::invalid_argument, std::to_string(total) + " samples cannot keep " +
                                             std::to_string(n) +
                                             " trainer ranks busy (each needs at least one)"};
  // Everything a rank's grpo_gradient would refuse is refused here, before any rank starts:
  // one rank failing alone would leave its peers waiting in a collective until the timeout
  // and break the group.
  for (int64_t i = 0; i < total; ++i) {
    const auto& s = samples[i];
    const std::string which = "training sample " + std::to_string(i) + ": ";
    if (s.prompt.size() != samples[0].prompt.size() || s.prompt.empty())
      return error{errc::invalid_argument, which + "prompts are empty or differ in length"};
    if (s.completion.empty() || s.behaviour_logprobs.size() != s.completion.size())
      return error{errc::invalid_argument,
                   which + "no completion, or a logprob count that differs from its token count"};
    if (int64_t(s.prompt.size() + s.completion.size()) > m.max_seq_len)
      return error{errc::invalid_argument,
                   which + "longer than policy.max_seq_len " + std::to_string(m.max_seq_len)};
    for (const auto* part : {&s.prompt, &s.completion})
      for (policy::token_id t : *part)
        if (t < 0 || t >= policy::num_vocab)
          return error{errc::invalid_argument,
                       which + "token id " + std::to_string(t) + " is outside the vocabulary"};
  }
  for (int r = 0; r < n; ++r) {
    const auto rr = rows_of_rank(total, r, n);
    int64_t len = 0;
    for (int64_t i = rr.first; i < rr.first + rr.count; ++i)
      len =
          std::max<int64_t>(len, int64_t(samples[i].prompt.size() + samples[i].completion.size()));
    if (rr.count * len > m.max_tokens_per_rank)
      return error{errc::invalid_argument, "trainer rank " + std::to_string(r) + " would run " +
                                               std::to_string(rr.count * len) +
                                               " tokens, over its bound " +
                                               std::to_string(m.max_tokens_per_rank)};
  }
  std::vector<ep_step_result> per_rank(n);
  auto st = m.group->run_on_ranks([&](ep_policy_group::rank_context& ctx) -> status {
    auto& rs = m.ranks[ctx.rank];
    const auto rr = rows_of_rank(total, ctx.rank, n);
    const double share = double(rr.count) / double(total);
    std::vector<policy::sample> mine(samples.begin() + rr.first,
                                     samples.begin() + rr.first + rr.count);
    std::vector<double> adv(advantages.begin() + rr.first,
                            advantages.begin() + rr.first + rr.count);
    for (auto& a : adv) a *= share;  // see the header: the ranks' losses sum to the full mean
    policy::grpo_config g = m.grpo;
    g.kl_coef *= share;
    for (int e = 0; e < m.grpo.epochs; ++e) {
      auto u = policy::grpo_gradient(*ctx.policy, mine, adv, g, m.temperature, nullptr, &rs.grads);
      if (!u) return u.err();
      per_rank[ctx.rank].update = *u;
      // One all-reduce: the dense gradients, then this rank's expert squared norm.
      rs.reduce_buf.resize(m.num_dense + 1);
      size_t k = 0;
      for (const auto& [off, len] : m.dense)
        for (size_t i = 0; i < len; ++i) rs.reduce_buf[k++] = rs.grads[off + i];
      double expert_sq = 0;
      {
        size_t next = 0;  // gaps between dense ranges are expert tensors
        auto add = [&](size_t a, size_t b) {
          for (size_t i = a; i < b; ++i) expert_sq += double(rs.grads[i]) * rs.grads[i];
        };
        for (const auto& [off, len] : m.dense) {
          add(next, off);
          next = off + len;
        }
        add(next, rs.grads.size());
      }
      rs.reduce_buf[k] = float(expert_sq);
      if (auto s = ctx.dense->all_reduce_sum(rs.reduce_buf.data(), rs.reduce_buf.size(),
                                             fabric::coll_dtype::fp32);
          !s)
        return error{s.err().code, "dense gradient all-reduce: " + s.err().message};
      k = 0;
      double dense_sq = 0;
      for (const auto& [off, len] : m.dense)
        for (size_t i = 0; i < len; ++i) {
          rs.grads[off + i] = rs.reduce_buf[k++];
          dense_sq += double(rs.grads[off + i]) * rs.grads[off + i];
        }
      // Identical on every rank (the same reduced floats), so every rank takes the same branch.
      const double norm = std::sqrt(dense_sq + double(rs.reduce_buf[k]));
      if (!std::isfinite(norm))
        return error{errc::invalid_argument, "gradient is not finite; step skipped"};
      const double clip = m.adam.grad_clip;
      if (clip > 0 && norm > clip) {
        const double scale = clip / norm;
        for (auto& x : rs.grads) x = float(x * scale);
      }
      auto s = rs.opt->step(ctx.policy->params(), rs.grads);
      if (!s) return s.err();
      per_rank[ctx.rank].grad_norm = norm;
    }
    return ok_status();
  });
  if (!st) return st.err();
  ep_step_result out;
  out.grad_norm = per_rank[0].grad_norm;
  int64_t tokens = 0;
  for (const auto& r : per_rank) {
    out.update.grpo.clip_fraction += r.update.grpo.clip_fraction * double(r.update.grpo.num_tokens);
    out.update.grpo.mean_ratio += r.update.grpo.mean_ratio * double(r.update.grpo.num_tokens);
    out.update.grpo.loss += r.update.grpo.loss;  // the ranks' losses sum to the full loss
    tokens += r.update.grpo.num_tokens;
    out.update.aux_loss += r.update.aux_loss;
    out.update.load_imbalance += r.update.load_imbalance / n;
  }
  if (tokens > 0) {
    out.update.grpo.clip_fraction /= double(tokens);
    out.update.grpo.mean_ratio /= double(tokens);
  }
  out.update.grpo.num_tokens = tokens;
  return out;
}

status ep_trainer::break_group_for_test() {
  const int last = impl_->group->num_ranks() - 1;
  return impl_->group->run_on_ranks([&](ep_policy_group::rank_context& ctx) -> status {
    if (ctx.rank == last)
      return error{errc::peer_dead, "rank " + std::to_string(last) + " left (test)"};
    float x = 1.0f;
    return ctx.dense->all_reduce_sum(&x, 1, fabric::coll_dtype::fp32);
  });
}

result<std::string> ep_trainer::serialize() const {
  auto full = impl_->group->full_params();
  if (!full) return full.err();
  return policy::serialize_params(impl_->group->full_layout(), *full);
}

status ep_trainer::load(const std::string& bytes) { return impl_->group->load(bytes); }

result<std::string> ep_trainer::serialize_adam() const {
  std::vector<std::string> parts;
  for (const auto& r : impl_->ranks) parts.push_back(r.opt->serialize());
  return assemble_adam_state(parts, impl_->group->full_layout(), impl_->group->rank_layout());
}

status ep_trainer::load_adam(const std::string& bytes) {
  const int n = impl_->group->num_ranks();
  std::vector<std::string> parts;
  for (int r = 0; r < n; ++r) {
    auto s =
        slice_adam_state(bytes, impl_->group->full_layout(), impl_->group->rank_layout(), r, n);
    if (!s) return s.err();
    parts.push_back(std::move(*s));
  }
  for (int r = 0; r < n; ++r)
    if (auto st = impl_->ranks[r].opt->load(parts[r]); !st) return st;
  return ok_status();
}

}  // namespace moerl::job
