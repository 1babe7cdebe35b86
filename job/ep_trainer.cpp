#include "job/ep_trainer.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <nlohmann/json.hpp>

#include "fabric/bootstrap.h"
#include "fabric/collectives.h"
#include "job/ep_policy_group.h"
#include "job/internal/ep_device_rank.h"
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
  std::vector<std::pair<size_t, size_t>> dense;    // dense ranges of a rank's buffer
  std::vector<std::pair<size_t, size_t>> experts;  // the rest: its expert tensors
  size_t num_dense = 0, num_experts = 0;
  struct rank_state {
    std::unique_ptr<policy::adam> opt;  // job.device=cpu (a device rank holds its own)
    std::vector<float> grads, reduce_buf;
  };
  std::vector<rank_state> ranks;  // [global rank]; only this process's are used
  // Each local rank's optimiser: host Adam without its own clipping (the step clips by the
  // global norm first), or on a device rank the device Adam clipping by the global norm it is
  // given (ep_device_rank::train_epoch).
  status make_optimizers() {
    if (!group->on_device()) {
      policy::adam_config unclipped = adam;
      unclipped.grad_clip = 0;
      for (auto& r : ranks)
        r.opt = std::make_unique<policy::adam>(unclipped, group->rank_layout().num_floats());
      return ok_status();
    }
    return group->run_on_ranks([&](ep_policy_group::rank_context& ctx) -> status {
      return ctx.device->make_optimizer(adam);
    });
  }
  // A local rank's Adam moments (adam.h bytes), and back.
  result<std::string> adam_of(int rank) const {
    if (!group->on_device()) return ranks[rank].opt->serialize();
    std::string out;
    auto st = group->run_on_ranks([&](ep_policy_group::rank_context& ctx) -> status {
      if (ctx.rank != rank) return ok_status();
      auto b = ctx.device->adam_bytes();
      if (!b) return b.err();
      out = std::move(*b);
      return ok_status();
    });
    if (!st) return st.err();
    return out;
  }
  status load_adam_of(int rank, const std::string& bytes) {
    if (!group->on_device()) return ranks[rank].opt->load(bytes);
    return group->run_on_ranks([&](ep_policy_group::rank_context& ctx) -> status {
      return ctx.rank == rank ? ctx.device->load_adam(bytes) : ok_status();
    });
  }
  // A group spanning processes (ep_trainer.h); member 0 sends, the others serve().
  bool spanning = false;
  ep_trainer_span span;
  int64_t op_timeout_ms = 30000;
  bool members_stopped = false;

  bool leads() const { return spanning && span.member_index == 0 && span.num_members > 1; }
  int first_local() const { return group->first_local_rank(); }
  int num_local() const { return group->num_local_ranks(); }
  // Member 0: the command every other member's serve() takes its part of.
  status command(const nlohmann::json& cmd) {
    if (!leads()) return ok_status();
    auto r = round(cmd, op_timeout_ms);
    if (!r)
      return error{r.err().code,
                   "trainer group command " + cmd.value("op", "") + ": " + r.err().message};
    return ok_status();
  }
  // A step's answer round: one contribution per member, on the fabric
  // (ep_policy_group::members_allgather), not through the coordinator.
  result<std::vector<std::string>> answer_round(const nlohmann::json& mine) {
    auto bytes = nlohmann::json::to_cbor(mine);
    return group->members_allgather(std::string(bytes.begin(), bytes.end()), span.num_members);
  }
  // One contribution per member through the coordinator (a command, a gather's answers).
  result<std::vector<std::string>> round(const nlohmann::json& mine, int64_t timeout_ms) {
    auto bytes = nlohmann::json::to_cbor(mine);
    auto r = span.members_allgather(std::string(bytes.begin(), bytes.end()), timeout_ms);
    if (r && leads()) {
      // The coordinator takes every member's contribution and sends all of them to each.
      uint64_t in = 0;
      for (const auto& c : *r) in += c.size();
      coordinator_bytes += in * (1 + uint64_t(span.num_members));
    }
    return r;
  }
  uint64_t coordinator_bytes = 0;       // member 0: since the last step began
  std::vector<nlohmann::json> answers;  // member 0: the last step's after_step answers
  result<ep_step_result> run_step(const std::vector<policy::sample>& samples,
                                  const std::vector<double>& advantages);
  result<std::vector<std::pair<int, std::string>>> own_shares() const;  // [{rank, params.h}]
  result<nlohmann::json> local_shares() const;  // {rank: params.h bytes of its share}
  result<nlohmann::json> local_adam() const;    // {rank: adam.h bytes of its moments}
  status load_local_adam(const std::string& bytes);
  // Member 0 of a spanning group, at a step's end: the answer round (on the fabric), in which
  // each other member sends what its after_step returned (its checkpoint shard's size and
  // hash, its weight shards' reports; never parameters or Adam moments), into `answers`.
  status gather_after_step();
  // Every rank's parameter share to rank 0 over the group's dense collectives (exact bytes),
  // not through the coordinator: ranks 1.. each broadcast their expert tensors (the dense
  // ones are rank 0's already). Collective: every member calls it right after its part of a
  // step. Returns, in rank 0's process, every rank's share (rank layout) [global rank] as
  // floats, which serialize() assembles without a round trip through params.h; elsewhere
  // nothing.
  result<std::vector<std::vector<float>>> exchange_shares_on_fabric();
  // A step's batch from member 0 to every member over the dense collectives (a broadcast
  // from global rank 0): the command through the coordinator carries only its size.
  // Collective; `bytes` is read on rank 0 and filled elsewhere.
  status broadcast_batch(std::string& bytes);
  struct gathered_state {
    std::vector<std::vector<float>> shares;  // [global rank], rank layout
  };
  std::optional<gathered_state> gathered;
};

namespace {

nlohmann::json::binary_t as_binary(const std::string& s) {
  return nlohmann::json::binary_t(std::vector<uint8_t>(s.begin(), s.end()));
}
std::string from_binary(const nlohmann::json& j) {
  const auto& b = j.get_binary();
  return std::string(b.begin(), b.end());
}

nlohmann::json encode_batch(const std::vector<policy::sample>& samples,
                            const std::vector<double>& advantages, uint64_t version) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& s : samples)
    arr.push_back({{"prompt", s.prompt},
                   {"completion", s.completion},
                   {"logprobs", s.behaviour_logprobs},
                   {"reward", s.reward},
                   {"group", s.group},
                   {"version", s.policy_version},
                   {"from_env", s.from_env}});  // multi-turn: env tokens carry no loss
  return {{"op", "step"}, {"samples", arr}, {"advantages", advantages}, {"version", version}};
}

result<std::pair<std::vector<policy::sample>, std::vector<double>>> decode_batch(
    const nlohmann::json& cmd) {
  try {
    std::vector<policy::sample> samples;
    for (const auto& j : cmd.at("samples")) {
      policy::sample s;
      j.at("prompt").get_to(s.prompt);
      j.at("completion").get_to(s.completion);
      j.at("logprobs").get_to(s.behaviour_logprobs);
      s.reward = j.at("reward").get<double>();
      s.group = j.at("group").get<int64_t>();
      s.policy_version = j.at("version").get<uint64_t>();
      j.at("from_env").get_to(s.from_env);
      samples.push_back(std::move(s));
    }
    return std::make_pair(std::move(samples), cmd.at("advantages").get<std::vector<double>>());
  } catch (const nlohmann::json::exception& e) {
    return error{errc::malformed_message, std::string("trainer group step command: ") + e.what()};
  }
}

}  // namespace

result<std::vector<std::pair<int, std::string>>> ep_trainer::impl::own_shares() const {
  std::vector<std::pair<int, std::string>> out;
  for (int r = first_local(); r < first_local() + num_local(); ++r) {
    auto share = group->share(r);
    if (!share) return share.err();
    out.emplace_back(r, policy::serialize_params(group->rank_layout(), *share));
  }
  return out;
}

result<nlohmann::json> ep_trainer::impl::local_shares() const {
  auto shares = own_shares();
  if (!shares) return shares.err();
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [r, bytes] : *shares) out[std::to_string(r)] = as_binary(bytes);
  return out;
}

result<std::vector<std::pair<int, std::string>>> ep_trainer::own_shares() const {
  return impl_->own_shares();
}

result<nlohmann::json> ep_trainer::impl::local_adam() const {
  nlohmann::json out = nlohmann::json::object();
  for (int r = first_local(); r < first_local() + num_local(); ++r) {
    auto bytes = adam_of(r);
    if (!bytes) return bytes.err();
    out[std::to_string(r)] = as_binary(*bytes);
  }
  return out;
}

status ep_trainer::impl::load_local_adam(const std::string& bytes) {
  const int n = group->num_ranks();
  std::vector<std::string> parts;
  for (int r = first_local(); r < first_local() + num_local(); ++r) {
    auto s = slice_adam_state(bytes, group->full_layout(), group->rank_layout(), r, n);
    if (!s) return s.err();
    parts.push_back(std::move(*s));
  }
  for (int k = 0; k < num_local(); ++k)
    if (auto st = load_adam_of(first_local() + k, parts[k]); !st) return st;
  return ok_status();
}

ep_trainer::ep_trainer(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
ep_trainer::~ep_trainer() {
  if (impl_) stop_members();
}

result<std::unique_ptr<ep_trainer>> ep_trainer::create(
    const config& cfg, const policy::model_config& model, const policy::grpo_config& grpo,
    const policy::adam_config& adam, float temperature, int num_ranks, int64_t max_samples_per_step,
    const ep_trainer_span* span) {
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
  if (span) {
    if (span->num_members * span->ranks_per_member != num_ranks || span->member_index < 0 ||
        span->member_index >= span->num_members)
      return error{errc::invalid_config,
                   "trainer group: " + std::to_string(span->num_members) + " members x " +
                       std::to_string(span->ranks_per_member) + " ranks is not " +
                       std::to_string(num_ranks) + " ranks, or member " +
                       std::to_string(span->member_index) + " is outside it"};
    p->spanning = true;
    p->span = *span;
    shape.first_rank = span->member_index * span->ranks_per_member;
    shape.num_local_ranks = span->ranks_per_member;
    shape.make_bootstrap = span->make_bootstrap;
    shape.abort = span->abort;
  }
  p->op_timeout_ms = cfg.get_int("fabric.op_timeout_ms");
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
  p->experts = expert_ranges(p->dense, p->group->rank_layout().num_floats());
  for (const auto& r : p->experts) p->num_experts += r.second;
  p->ranks.resize(num_ranks);
  if (auto st = p->make_optimizers(); !st) return st.err();
  return std::unique_ptr<ep_trainer>(new ep_trainer(std::move(p)));
}

result<ep_step_result> ep_trainer::step(const std::vector<policy::sample>& samples,
                                        const std::vector<double>& advantages, uint64_t version,
                                        const std::function<status()>& before_answers) {
  impl& m = *impl_;
  if (m.group->broken() && m.spanning)
    return error{errc::peer_dead, "the trainer group across nodes is broken; it re-forms"};
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
    if (auto st = m.make_optimizers(); !st) return st.err();
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
  m.gathered.reset();
  m.coordinator_bytes = 0;
  m.answers.clear();
  if (m.leads()) {
    // The command says a step of this many batch bytes follows; the bytes go over the fabric.
    const auto cbor = nlohmann::json::to_cbor(encode_batch(samples, advantages, version));
    std::string batch(cbor.begin(), cbor.end());
    if (auto st = m.command({{"op", "step"}, {"version", version}, {"batch_bytes", batch.size()}});
        !st)
      return st.err();
    if (auto st = m.broadcast_batch(batch); !st) return st.err();
  }
  auto out = m.run_step(samples, advantages);
  if (!out || !m.leads()) return out;
  auto shares = m.exchange_shares_on_fabric();
  if (!shares) return shares.err();
  m.gathered = impl::gathered_state{std::move(*shares)};
  if (before_answers)
    if (auto st = before_answers(); !st) return st.err();
  if (auto st = m.gather_after_step(); !st) return st.err();
  return out;
}

result<ep_step_result> ep_trainer::impl::run_step(const std::vector<policy::sample>& samples,
                                                  const std::vector<double>& advantages) {
  impl& m = *this;
  const int n = m.group->num_ranks();
  const int64_t total = static_cast<int64_t>(samples.size());
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
    if (ctx.device) {  // the same epochs on the device: ep_device_rank::train_epoch
      for (int e = 0; e < m.grpo.epochs; ++e) {
        auto r =
            ctx.device->train_epoch(mine, adv, g, m.temperature, m.dense, m.num_dense, *ctx.dense);
        if (!r) return r.err();
        per_rank[ctx.rank].update = r->first;
        per_rank[ctx.rank].grad_norm = r->second;
      }
      return ok_status();
    }
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
      for (const auto& [off, len] : m.experts)
        for (size_t i = off; i < off + len; ++i) expert_sq += double(rs.grads[i]) * rs.grads[i];
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
  // Figures of this process's ranks (a spanning group's other members keep theirs); the
  // gradient norm is global.
  ep_step_result out;
  out.grad_norm = per_rank[first_local()].grad_norm;
  int64_t tokens = 0;
  for (int k = first_local(); k < first_local() + num_local(); ++k) {
    const auto& r = per_rank[k];
    out.update.grpo.clip_fraction += r.update.grpo.clip_fraction * double(r.update.grpo.num_tokens);
    out.update.grpo.mean_ratio += r.update.grpo.mean_ratio * double(r.update.grpo.num_tokens);
    out.update.grpo.loss += r.update.grpo.loss;  // the ranks' losses sum to the full loss
    tokens += r.update.grpo.num_tokens;
    out.update.aux_loss += r.update.aux_loss;
    out.update.load_imbalance += r.update.load_imbalance / num_local();
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

namespace {

// Adds one member's {rank: bytes} contribution to out[rank].
status take_shares(const nlohmann::json& j, std::vector<std::string>& out,
                   std::vector<bool>& seen) {
  if (!j.is_object())
    return error{errc::malformed_message, "a trainer group member's shares did not decode"};
  const int num_ranks = static_cast<int>(out.size());
  for (auto& [k, v] : j.items()) {
    const int r = std::atoi(k.c_str());
    if (r < 0 || r >= num_ranks || !v.is_binary() || seen[r])
      return error{errc::malformed_message, "trainer group share of rank " + k + " is malformed"};
    seen[r] = true;
    out[r] = from_binary(v);
  }
  return ok_status();
}

status all_seen(const std::vector<bool>& seen) {
  for (size_t r = 0; r < seen.size(); ++r)
    if (!seen[r])
      return error{errc::peer_dead, "trainer group: no share of rank " + std::to_string(r)};
  return ok_status();
}

// Every rank's bytes from the members' {rank: bytes} contributions.
result<std::vector<std::string>> per_rank_bytes(const std::vector<std::string>& contributions,
                                                int num_ranks) {
  std::vector<std::string> out(num_ranks);
  std::vector<bool> seen(num_ranks, false);
  for (const auto& c : contributions)
    if (auto st = take_shares(nlohmann::json::from_cbor(c, true, false), out, seen); !st)
      return st.err();
  if (auto st = all_seen(seen); !st) return st.err();
  return out;
}

}  // namespace

status ep_trainer::impl::gather_after_step() {
  // The answers carry each member's checkpoint shard (size and hash) only: the parameter
  // shares crossed on the fabric (exchange_shares_on_fabric).
  auto all = answer_round(nlohmann::json::object());
  if (!all) return error{all.err().code, "trainer group step answer: " + all.err().message};
  for (const auto& c : *all) {
    auto j = nlohmann::json::from_cbor(c, true, false);
    if (!j.is_object())
      return error{errc::malformed_message, "a trainer group member's step answer did not decode"};
    if (j.empty()) continue;  // member 0's
    answers.push_back(j.value("shard", nlohmann::json()));
  }
  return ok_status();
}

result<std::vector<std::vector<float>>> ep_trainer::impl::exchange_shares_on_fabric() {
  const int n = group->num_ranks();
  // [local rank thread][global rank]: each thread receives every share (a broadcast delivers
  // to every rank); the first local thread's copy is kept.
  std::vector<std::vector<std::vector<float>>> got(static_cast<size_t>(num_local()));
  auto st = group->run_on_ranks([&](ep_policy_group::rank_context& ctx) -> status {
    auto& mine = got[static_cast<size_t>(ctx.rank - first_local())];
    mine.assign(static_cast<size_t>(n), {});
    if (ctx.device) {  // NCCL from each root's device parameters (ep_device_rank.h)
      for (int root = 0; root < n; ++root) {
        auto sh = ctx.device->broadcast_share(*ctx.dense, root);
        if (!sh)
          return error{sh.err().code, "parameter share of rank " + std::to_string(root) +
                                          " over NCCL: " + sh.err().message};
        mine[root] = std::move(*sh);
      }
      return ok_status();
    }
    // Only the expert tensors differ between ranks: the dense ones are equal after the
    // all-reduce, and serialize() takes them from rank 0 anyway. And only rank 0 keeps what
    // arrives. So every rank's expert floats are gathered to rank 0 in one round (it was n-1
    // broadcasts, each a round trip to every rank), and rank 0 puts each rank's into a copy of
    // its own share (whose dense tensors are the same).
    const auto& own = ctx.policy->params();
    std::vector<float> expert_floats(num_experts);
    float* out = expert_floats.data();
    for (const auto& [off, len] : experts) out = std::copy_n(own.data() + off, len, out);
    std::vector<float> all(ctx.rank == 0 ? num_experts * static_cast<size_t>(n) : 0);
    if (auto g = ctx.dense->gather(expert_floats.data(), expert_floats.size() * sizeof(float),
                                   all.data(), 0);
        !g)
      return error{g.err().code, "expert parameters to rank 0 over the fabric: " + g.err().message};
    if (ctx.rank != 0) return ok_status();
    mine[0] = own;
    for (int from = 1; from < n; ++from) {
      mine[from] = own;
      const float* in = all.data() + static_cast<size_t>(from) * num_experts;
      for (const auto& [off, len] : experts) {
        std::copy_n(in, len, mine[from].data() + off);
        in += len;
      }
    }
    return ok_status();
  });
  if (!st) return st.err();
  if (first_local() != 0) return std::vector<std::vector<float>>{};  // only rank 0's keeps them
  return std::move(got[0]);
}

status ep_trainer::impl::broadcast_batch(std::string& bytes) {
  return group->run_on_ranks([&](ep_policy_group::rank_context& ctx) -> status {
    // Rank 0 (member 0's first rank) is the root; every other rank receives into the buffer
    // its process sized from the command (one buffer per process: its ranks write the same
    // bytes, so the first local rank's write is the one kept).
    if (ctx.rank != first_local()) {
      std::string scratch(bytes.size(), '\0');
      return ctx.device ? ctx.device->broadcast_bytes(*ctx.dense, scratch, 0)
                        : ctx.dense->broadcast(scratch.data(), scratch.size(), 0);
    }
    auto b = ctx.device ? ctx.device->broadcast_bytes(*ctx.dense, bytes, 0)
                        : ctx.dense->broadcast(bytes.data(), bytes.size(), 0);
    if (!b) return error{b.err().code, "trainer group batch over the fabric: " + b.err().message};
    return ok_status();
  });
}

nlohmann::json ep_trainer::expert_plane() const {
  const auto& d = impl_->group->expert_plane(impl_->first_local());
  return {{"provider", d.provider}, {"peer_paths", d.peer_paths}};
}

result<std::string> ep_trainer::serialize() const {
  impl& m = *impl_;
  if (!m.leads()) {
    auto full = m.group->full_params();
    if (!full) return full.err();
    return policy::serialize_params(m.group->full_layout(), *full);
  }
  std::vector<std::vector<float>> received;  // when no step left its shares in `gathered`
  if (!m.gathered) {
    if (auto st = m.command({{"op", "params"}}); !st) return st.err();
    auto mine = m.local_shares();
    if (!mine) return mine.err();
    auto all = m.round(*mine, m.op_timeout_ms);
    if (!all) return all.err();
    auto bytes = per_rank_bytes(*all, m.group->num_ranks());
    if (!bytes) return bytes.err();
    for (const auto& b : *bytes) {
      auto f = policy::deserialize_params(b, &m.group->rank_layout());
      if (!f) return f.err();
      received.push_back(std::move(*f));
    }
  }
  // After a step, the shares it exchanged on the fabric (exchange_shares_on_fabric).
  const auto& shares = m.gathered ? m.gathered->shares : received;
  auto full = assemble_params(m.group->full_layout(), m.group->rank_layout(), shares);
  if (!full) return full.err();
  return policy::serialize_params(m.group->full_layout(), *full);
}

status ep_trainer::load(const std::string& bytes) {
  impl_->gathered.reset();
  if (auto st = impl_->command({{"op", "load"}, {"bytes", as_binary(bytes)}}); !st) return st;
  return impl_->group->load(bytes);
}

result<std::string> ep_trainer::serialize_adam() const {
  impl& m = *impl_;
  std::vector<std::string> parts;
  if (!m.leads()) {
    for (int r = m.first_local(); r < m.first_local() + m.num_local(); ++r) {
      auto bytes = m.adam_of(r);
      if (!bytes) return bytes.err();
      parts.push_back(std::move(*bytes));
    }
  } else {
    if (auto st = m.command({{"op", "adam"}}); !st) return st.err();
    auto mine = m.local_adam();
    if (!mine) return mine.err();
    auto all = m.round(*mine, m.op_timeout_ms);
    if (!all) return all.err();
    auto bytes = per_rank_bytes(*all, m.group->num_ranks());
    if (!bytes) return bytes.err();
    parts = std::move(*bytes);
  }
  return assemble_adam_state(parts, m.group->full_layout(), m.group->rank_layout());
}

status ep_trainer::load_adam(const std::string& bytes) {
  impl_->gathered.reset();
  if (auto st = impl_->command({{"op", "load_adam"}, {"bytes", as_binary(bytes)}}); !st) return st;
  return impl_->load_local_adam(bytes);
}

void ep_trainer::stop_members() {
  if (!impl_->leads() || impl_->members_stopped || impl_->group->broken()) return;
  impl_->members_stopped = true;
  (void)impl_->command({{"op", "stop"}});
}

int ep_trainer::num_ranks() const { return impl_->group->num_ranks(); }
const policy::param_layout& ep_trainer::full_layout() const { return impl_->group->full_layout(); }
uint64_t ep_trainer::coordinator_bytes() const { return impl_->coordinator_bytes; }
const std::vector<nlohmann::json>& ep_trainer::member_answers() const { return impl_->answers; }

namespace {
std::string rank_part(int rank, const char* what) {
  return "rank-" + std::to_string(rank) + "/" + what;
}
}  // namespace

result<std::vector<state_part>> ep_trainer::local_state() const {
  const impl& m = *impl_;
  std::vector<state_part> out;
  for (int r = m.first_local(); r < m.first_local() + m.num_local(); ++r) {
    auto share = m.group->share(r);
    if (!share) return share.err();
    auto adam = m.adam_of(r);
    if (!adam) return adam.err();
    out.push_back(
        {rank_part(r, "params"), policy::serialize_params(m.group->rank_layout(), *share)});
    out.push_back({rank_part(r, "adam"), std::move(*adam)});
  }
  return out;
}

status ep_trainer::load_local_state(const std::vector<state_part>& parts) {
  impl& m = *impl_;
  m.gathered.reset();
  auto find = [&](const std::string& name) -> const std::string* {
    for (const auto& p : parts)
      if (p.name == name) return &p.bytes;
    return nullptr;
  };
  for (int r = m.first_local(); r < m.first_local() + m.num_local(); ++r) {
    const std::string* params = find(rank_part(r, "params"));
    const std::string* adam = find(rank_part(r, "adam"));
    if (!params || !adam)
      return error{errc::malformed_message, "checkpoint shard has no " +
                                                rank_part(r, params ? "adam" : "params") +
                                                " (its ranks are not this member's)"};
    auto share = policy::deserialize_params(*params, &m.group->rank_layout());
    if (!share) return error{share.err().code, rank_part(r, "params") + ": " + share.err().message};
    if (auto st = m.group->load_share(r, std::move(*share)); !st) return st;
    if (auto st = m.load_adam_of(r, *adam); !st)
      return error{st.err().code, rank_part(r, "adam") + ": " + st.err().message};
  }
  return ok_status();
}

status ep_trainer::restore_members(const std::string& prefix, uint64_t version,
                                   uint64_t as_version) {
  impl& m = *impl_;
  m.gathered.reset();
  if (!m.leads()) return ok_status();
  if (auto st = m.command({{"op", "restore"},
                           {"prefix", prefix},
                           {"version", version},
                           {"as_version", as_version}});
      !st)
    return st;
  auto all = m.round(nlohmann::json::object(), m.op_timeout_ms);
  if (!all) return error{all.err().code, "trainer group restore answer: " + all.err().message};
  for (size_t k = 1; k < all->size(); ++k) {
    auto j = nlohmann::json::from_cbor((*all)[k], true, false);
    if (!j.is_object())
      return error{errc::malformed_message, "trainer group member " + std::to_string(k) +
                                                "'s restore answer did not decode"};
    if (j.contains("error"))
      return error{errc::internal, "trainer group member " + std::to_string(k) +
                                       " could not restore its shard of checkpoint " +
                                       std::to_string(version) + ": " + j["error"].dump()};
  }
  return ok_status();
}

status ep_trainer::serve(const ep_member_hooks& hooks) {
  impl& m = *impl_;
  if (!m.spanning || m.span.member_index == 0)
    return error{errc::internal, "ep_trainer::serve: only a trainer group's members 1.. serve"};
  // A member waits for commands as long as rank 0 waits for batches; the group's breaking
  // (a member lost) ends the wait at once (the coordinator fails the round).
  constexpr int64_t kCommandWaitMs = 3600 * 1000;
  for (;;) {
    auto r = m.round(nullptr, kCommandWaitMs);
    if (!r) return r.err();
    if (r->empty()) return error{errc::internal, "trainer group command round without rank 0"};
    auto cmd = nlohmann::json::from_cbor((*r)[0], true, false);
    const std::string op = cmd.is_object() ? cmd.value("op", "") : "";
    if (op == "stop") return ok_status();
    if (op == "step") {
      const uint64_t size = cmd.value("batch_bytes", uint64_t(0));
      if (size == 0 || size > (uint64_t(1) << 32))
        return error{errc::malformed_message,
                     "trainer group step command without a plausible batch_bytes"};
      std::string bytes(size, '\0');
      if (auto st = m.broadcast_batch(bytes); !st) return st;
      auto batch = decode_batch(nlohmann::json::from_cbor(bytes, true, false));
      if (!batch) return batch.err();
      if (auto st = m.run_step(batch->first, batch->second); !st) return st.err();
      if (auto shares = m.exchange_shares_on_fabric(); !shares) return shares.err();
      // This member checkpoints its own state (in the background); its parameter shares went
      // to member 0 on the fabric (above), so the step's answer carries only its shard's size.
      nlohmann::json shard;
      if (hooks.after_step) {
        auto a = hooks.after_step(cmd.value("version", uint64_t(0)));
        if (!a) return a.err();
        shard = std::move(*a);
      }
      auto answer = m.answer_round({{"shard", shard}});
      if (!answer) return answer.err();
    } else if (op == "restore") {
      m.gathered.reset();
      const status st =
          hooks.restore
              ? hooks.restore(cmd.value("prefix", std::string()), cmd.value("version", uint64_t(0)),
                              cmd.value("as_version", uint64_t(0)))
              : status(error{errc::internal, "this member cannot restore checkpoints"});
      auto answer =
          m.round(st ? nlohmann::json::object() : nlohmann::json{{"error", st.err().to_string()}},
                  m.op_timeout_ms);
      if (!answer) return answer.err();
      if (!st) return st;
    } else if (op == "params" || op == "adam") {
      auto mine = op == "params" ? m.local_shares() : m.local_adam();
      if (!mine) return mine.err();
      auto all = m.round(*mine, m.op_timeout_ms);
      if (!all) return all.err();
    } else if (op == "load" || op == "load_adam") {
      if (!cmd.contains("bytes") || !cmd["bytes"].is_binary())
        return error{errc::malformed_message, "trainer group " + op + " command without bytes"};
      const std::string bytes = from_binary(cmd["bytes"]);
      if (auto st = op == "load" ? m.group->load(bytes) : m.load_local_adam(bytes); !st) return st;
    } else {
      return error{errc::malformed_message, "trainer group: unknown command '" + op + "'"};
    }
  }
}

}  // namespace moerl::job
