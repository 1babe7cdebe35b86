#include "policy/model.h"

#include <algorithm>
#include <cmath>

#include "common/status_try.h"
#include "policy/dense_ops.h"
#include "policy/internal/model_common.h"

namespace moerl::policy {

namespace {
error bad_key(const std::string& key, const std::string& what) {
  return {errc::invalid_config, "key '" + key + "': " + what};
}
}  // namespace

result<model_config> model_config::from_config(const config& c) {
  model_config m;
  m.max_seq_len = static_cast<int>(c.get_int("policy.max_seq_len"));
  m.d_model = static_cast<int>(c.get_int("policy.d_model"));
  m.num_layers = static_cast<int>(c.get_int("policy.num_layers"));
  m.num_heads = static_cast<int>(c.get_int("policy.num_heads"));
  m.num_experts = static_cast<int>(c.get_int("policy.num_experts"));
  m.top_k = static_cast<int>(c.get_int("policy.top_k"));
  m.ffn_dim = static_cast<int>(c.get_int("policy.ffn_dim"));
  m.aux_loss_coef = static_cast<float>(c.get_double("policy.aux_loss_coef"));
  m.seed = static_cast<uint64_t>(c.get_int("policy.seed"));
  m.num_threads = static_cast<int>(c.get_int("policy.num_threads"));
  STATUS_TRY(m.validate());
  return m;
}

status model_config::validate() const {
  auto in = [](int v, int lo, int hi) { return v >= lo && v <= hi; };
  if (!in(max_seq_len, 2, 4096)) return bad_key("policy.max_seq_len", "must be in 2..4096");
  if (!in(d_model, 1, 8192)) return bad_key("policy.d_model", "must be in 1..8192");
  if (!in(num_layers, 1, 256)) return bad_key("policy.num_layers", "must be in 1..256");
  if (num_heads < 1 || d_model % num_heads != 0)
    return bad_key("policy.num_heads",
                   "must be >= 1 and divide policy.d_model (" + std::to_string(d_model) + ")");
  if (!in(num_experts, 1, 4096)) return bad_key("policy.num_experts", "must be in 1..4096");
  if (!in(top_k, 1, num_experts))
    return bad_key("policy.top_k",
                   "must be in 1..policy.num_experts (" + std::to_string(num_experts) + ")");
  if (!in(ffn_dim, 1, 65536)) return bad_key("policy.ffn_dim", "must be in 1..65536");
  if (!(aux_loss_coef >= 0)) return bad_key("policy.aux_loss_coef", "must be >= 0");
  if (!in(num_threads, 0, 256)) return bad_key("policy.num_threads", "must be in 0..256");
  return ok_status();
}

moe_policy::moe_policy(const model_config& cfg, expert_exchange& exchange)
    : cfg_(cfg), exchange_(exchange), pool_(cfg.num_threads) {
  moe_shape s{cfg.num_experts, cfg.top_k, cfg.d_model, cfg.ffn_dim, cfg.aux_loss_coef};
  for (int l = 0; l < cfg.num_layers; ++l) moe_.emplace_back(s, pool_, exchange_);
}

result<std::unique_ptr<moe_policy>> moe_policy::create(const model_config& cfg,
                                                       expert_exchange& exchange) {
  STATUS_TRY(cfg.validate());
  if (cfg.num_experts % exchange.num_ranks() != 0)
    return error{errc::invalid_config,
                 "key 'policy.num_experts': " + std::to_string(cfg.num_experts) +
                     " experts do not split evenly over " + std::to_string(exchange.num_ranks()) +
                     " expert-parallel ranks"};
  std::unique_ptr<moe_policy> m(new moe_policy(cfg, exchange));
  m->build_layout();
  m->init_params();
  return m;
}

void moe_policy::build_layout() {
  const int64_t d = cfg_.d_model, V = num_vocab, F = cfg_.ffn_dim;
  const int64_t local = cfg_.num_experts / exchange_.num_ranks();
  tok_emb_ = layout_.add("tok_emb", {V, d});
  pos_emb_ = layout_.add("pos_emb", {cfg_.max_seq_len, d});
  for (int l = 0; l < cfg_.num_layers; ++l) {
    const std::string pre = "layer" + std::to_string(l) + ".";
    layer_offsets o;
    o.norm1 = layout_.add(pre + "norm1", {d});
    o.wqkv = layout_.add(pre + "attn.wqkv", {d, 3 * d});
    o.wo = layout_.add(pre + "attn.wo", {d, d});
    o.norm2 = layout_.add(pre + "norm2", {d});
    o.router = layout_.add(pre + "moe.router", {d, cfg_.num_experts});
    o.w_gate_up = layout_.add(pre + "moe.w_gate_up", {local, 2 * F, d});
    o.w_down = layout_.add(pre + "moe.w_down", {local, d, F});
    lo_.push_back(o);
  }
  norm_f_ = layout_.add("norm_f", {d});
  head_ = layout_.add("head", {d, V});
  params_.assign(layout_.num_floats(), 0.0f);
}

void moe_policy::init_params() {
  const float d = cfg_.d_model, F = cfg_.ffn_dim;
  const float resid = 1.0f / std::sqrt(2.0f * cfg_.num_layers);  // keeps the stream's scale
  const int local = cfg_.num_experts / exchange_.num_ranks();
  const int first_expert = exchange_.rank() * local;
  auto fill = [&](size_t off, size_t n, float stddev, const std::string& name, uint64_t salt) {
    std::mt19937_64 rng(
        fnv1a64(name.data(), name.size(), cfg_.seed * 0x9e3779b97f4a7c15ull + salt));
    std::normal_distribution<float> dist(0.0f, stddev);
    for (size_t i = 0; i < n; ++i) params_[off + i] = dist(rng);
  };
  for (const auto& t : layout_.tensors()) {
    const std::string& n = t.name;
    auto ends = [&](const char* s) {
      std::string suf(s);
      return n.size() >= suf.size() && n.compare(n.size() - suf.size(), suf.size(), suf) == 0;
    };
    if (ends("norm1") || ends("norm2") || n == "norm_f") {
      std::fill(params_.begin() + t.offset, params_.begin() + t.offset + t.size(), 1.0f);
    } else if (n == "tok_emb" || n == "pos_emb") {
      fill(t.offset, t.size(), 1.0f, n, 0);
    } else if (n == "head") {
      fill(t.offset, t.size(), 0.02f, n, 0);  // near-uniform first policy
    } else if (ends("attn.wqkv") || ends("moe.router")) {
      fill(t.offset, t.size(), 1.0f / std::sqrt(d), n, 0);
    } else if (ends("attn.wo")) {
      fill(t.offset, t.size(), resid / std::sqrt(d), n, 0);
    } else if (ends("moe.w_gate_up") || ends("moe.w_down")) {
      const size_t per = t.size() / local;
      const float sd = ends("moe.w_gate_up") ? 1.0f / std::sqrt(d) : resid / std::sqrt(F);
      for (int j = 0; j < local; ++j)  // per global expert: shards start like the whole
        fill(t.offset + j * per, per, sd, n, 1 + uint64_t(first_expert + j));
    }
  }
}

status moe_policy::load(const std::string& bytes) {
  ASSIGN_OR_RETURN(auto data, deserialize_params(bytes, &layout_));
  params_ = std::move(data);
  return ok_status();
}

moe_weights moe_policy::moe_weights_of(int l) const {
  return {p(lo_[l].router), p(lo_[l].w_gate_up), p(lo_[l].w_down)};
}

status moe_policy::forward(const std::vector<token_id>& tokens, int64_t b, int64_t t,
                           forward_state* st, const std::vector<uint8_t>& mask) {
  const int64_t d = cfg_.d_model, n = b * t;
  STATUS_TRY(detail::check_forward_args(cfg_, tokens, b, t, mask));
  st->batch = b;
  st->seq_len = t;
  st->tokens = tokens;
  st->mask = mask.empty() ? std::vector<uint8_t>(n, 1) : mask;

  std::vector<float> x(n * d);
  embed_forward(p(tok_emb_), p(pos_emb_), tokens.data(), n, t, 0, d, x.data());
  st->layers.resize(cfg_.num_layers);
  st->aux_loss = 0;
  for (int l = 0; l < cfg_.num_layers; ++l) {
    auto& a = st->layers[l];
    const auto& o = lo_[l];
    a.x_in = x;
    a.h1.resize(n * d);
    a.inv1.resize(n);
    rmsnorm_forward(x.data(), p(o.norm1), n, d, a.h1.data(), a.inv1.data());
    a.qkv.resize(n * 3 * d);
    linear_forward(a.h1.data(), p(o.wqkv), n, d, 3 * d, a.qkv.data());
    a.probs.resize(b * cfg_.num_heads * t * t);
    a.attn.resize(n * d);
    attention_forward(a.qkv.data(), b, t, cfg_.num_heads, d / cfg_.num_heads, a.probs.data(),
                      a.attn.data());
    std::vector<float> proj(n * d);
    linear_forward(a.attn.data(), p(o.wo), n, d, d, proj.data());
    add_inplace(x.data(), proj.data(), n * d);
    a.x_mid = x;
    a.h2.resize(n * d);
    a.inv2.resize(n);
    rmsnorm_forward(x.data(), p(o.norm2), n, d, a.h2.data(), a.inv2.data());
    std::vector<float> y(n * d);
    STATUS_TRY(moe_[l].forward(moe_weights_of(l), a.h2.data(), st->mask.data(), n,
                               exchange_mode::normal, &a.moe, y.data()));
    add_inplace(x.data(), y.data(), n * d);
    st->aux_loss += a.moe.aux_loss;
  }
  st->x_final = x;
  st->h_final.resize(n * d);
  st->inv_final.resize(n);
  rmsnorm_forward(x.data(), p(norm_f_), n, d, st->h_final.data(), st->inv_final.data());
  st->logits.resize(n * num_vocab);
  linear_forward(st->h_final.data(), p(head_), n, d, num_vocab, st->logits.data());
  return ok_status();
}

status moe_policy::backward(forward_state& st, const std::vector<float>& dlogits,
                            std::vector<float>* grads) {
  const int64_t d = cfg_.d_model, b = st.batch, t = st.seq_len, n = b * t;
  if (static_cast<int64_t>(dlogits.size()) != n * num_vocab)
    return error{errc::invalid_argument, "policy backward: dlogits has " +
                                             std::to_string(dlogits.size()) + " values, expected " +
                                             std::to_string(n * num_vocab)};
  if (grads->size() < params_.size()) grads->resize(params_.size(), 0.0f);
  float* g = grads->data();

  std::vector<float> dh(n * d), dx(n * d, 0.0f);
  linear_backward(st.h_final.data(), p(head_), dlogits.data(), n, d, num_vocab, dh.data(),
                  g + head_);
  rmsnorm_backward(st.x_final.data(), p(norm_f_), st.inv_final.data(), dh.data(), n, d, dx.data(),
                   g + norm_f_);

  std::vector<float> dh2(n * d), dattn(n * d), dqkv(n * 3 * d), dh1(n * d);
  for (int l = cfg_.num_layers - 1; l >= 0; --l) {
    auto& a = st.layers[l];
    const auto& o = lo_[l];
    // x_out = x_mid + moe(h2): dx flows to x_mid directly and through the MoE.
    moe_grads mg{g + o.router, g + o.w_gate_up, g + o.w_down};
    STATUS_TRY(moe_[l].backward(moe_weights_of(l), a.h2.data(), a.moe, dx.data(),
                                exchange_mode::normal, dh2.data(), mg));
    rmsnorm_backward(a.x_mid.data(), p(o.norm2), a.inv2.data(), dh2.data(), n, d, dx.data(),
                     g + o.norm2);
    // x_mid = x_in + attn * wo
    linear_backward(a.attn.data(), p(o.wo), dx.data(), n, d, d, dattn.data(), g + o.wo);
    attention_backward(a.qkv.data(), a.probs.data(), dattn.data(), b, t, cfg_.num_heads,
                       d / cfg_.num_heads, dqkv.data());
    linear_backward(a.h1.data(), p(o.wqkv), dqkv.data(), n, d, 3 * d, dh1.data(), g + o.wqkv);
    rmsnorm_backward(a.x_in.data(), p(o.norm1), a.inv1.data(), dh1.data(), n, d, dx.data(),
                     g + o.norm1);
  }
  embed_backward(st.tokens.data(), dx.data(), n, t, d, g + tok_emb_, g + pos_emb_);
  return ok_status();
}

result<generation> moe_policy::generate(const std::vector<std::vector<token_id>>& prompts,
                                        int max_new, float temperature, std::mt19937_64& rng) {
  const int64_t B = prompts.size(), d = cfg_.d_model;
  if (B == 0) return generation{};
  STATUS_TRY(detail::check_generate_args(cfg_, prompts, max_new, temperature));
  const int64_t P = prompts[0].size();

  const int64_t T = P + max_new;
  std::vector<std::vector<float>> k_cache(cfg_.num_layers, std::vector<float>(B * T * d)),
      v_cache(cfg_.num_layers, std::vector<float>(B * T * d));
  generation out;
  out.completions.resize(B);
  out.logprobs.resize(B);
  std::vector<uint8_t> active(B, 1);
  std::vector<token_id> input(B);
  std::vector<float> x(B * d), h(B * d), inv(B), qkv(B * 3 * d), q(B * d), o(B * d), proj(B * d),
      y(B * d), logits(B * num_vocab);
  moe_state scratch;

  for (int64_t pos = 0; pos + 1 < T; ++pos) {
    for (int64_t r = 0; r < B; ++r)
      input[r] = pos < P ? prompts[r][pos] : (active[r] ? out.completions[r].back() : tok_pad);
    embed_forward(p(tok_emb_), p(pos_emb_), input.data(), B, 1, pos, d, x.data());
    for (int l = 0; l < cfg_.num_layers; ++l) {
      const auto& lo = lo_[l];
      rmsnorm_forward(x.data(), p(lo.norm1), B, d, h.data(), inv.data());
      linear_forward(h.data(), p(lo.wqkv), B, d, 3 * d, qkv.data());
      for (int64_t r = 0; r < B; ++r) {
        std::copy_n(&qkv[r * 3 * d], d, &q[r * d]);
        std::copy_n(&qkv[r * 3 * d + d], d, &k_cache[l][(r * T + pos) * d]);
        std::copy_n(&qkv[r * 3 * d + 2 * d], d, &v_cache[l][(r * T + pos) * d]);
      }
      attention_decode(q.data(), k_cache[l].data(), v_cache[l].data(), B, T, pos, cfg_.num_heads,
                       d / cfg_.num_heads, o.data());
      linear_forward(o.data(), p(lo.wo), B, d, d, proj.data());
      add_inplace(x.data(), proj.data(), B * d);
      rmsnorm_forward(x.data(), p(lo.norm2), B, d, h.data(), inv.data());
      STATUS_TRY(moe_[l].forward(moe_weights_of(l), h.data(), active.data(), B,
                                 exchange_mode::low_latency, &scratch, y.data()));
      add_inplace(x.data(), y.data(), B * d);
    }
    if (pos + 1 < P) continue;  // still reading the prompt
    rmsnorm_forward(x.data(), p(norm_f_), B, d, h.data(), inv.data());
    linear_forward(h.data(), p(head_), B, d, num_vocab, logits.data());
    const bool any = detail::sample_step(logits.data(), B, temperature, max_new, rng, active, out);
    // With several ranks every rank must keep stepping (the exchange is collective, and
    // other ranks may still have live rows); alone, stop as soon as every row is done.
    if (!any && exchange_.num_ranks() == 1) break;
  }
  return out;
}

namespace detail {

status check_forward_args(const model_config& cfg, const std::vector<token_id>& tokens, int64_t b,
                          int64_t t, const std::vector<uint8_t>& mask) {
  const int64_t n = b * t;
  if (b < 1 || t < 1 || static_cast<int64_t>(tokens.size()) != n)
    return error{errc::invalid_argument, "policy forward: " + std::to_string(tokens.size()) +
                                             " tokens do not form a [" + std::to_string(b) + ", " +
                                             std::to_string(t) + "] batch"};
  if (t > cfg.max_seq_len)
    return error{errc::invalid_argument, "policy forward: sequence length " + std::to_string(t) +
                                             " exceeds policy.max_seq_len " +
                                             std::to_string(cfg.max_seq_len)};
  for (token_id tok : tokens)
    if (tok < 0 || tok >= num_vocab)
      return error{errc::invalid_argument, "policy forward: token id " + std::to_string(tok) +
                                               " is outside the vocabulary"};
  if (!mask.empty() && static_cast<int64_t>(mask.size()) != n)
    return error{errc::invalid_argument, "policy forward: mask has " + std::to_string(mask.size()) +
                                             " entries for " + std::to_string(n) + " tokens"};
  return ok_status();
}

status check_generate_args(const model_config& cfg,
                           const std::vector<std::vector<token_id>>& prompts, int max_new,
                           float temperature) {
  const int64_t P = prompts[0].size();
  for (const auto& pr : prompts) {
    if (static_cast<int64_t>(pr.size()) != P || P == 0)
      return error{errc::invalid_argument,
                   "generate: prompts must be non-empty and of equal length"};
    for (token_id tok : pr)
      if (tok < 0 || tok >= num_vocab)
        return error{errc::invalid_argument, "generate: prompt token id " + std::to_string(tok) +
                                                 " is outside the vocabulary"};
  }
  if (max_new < 1 || P + max_new > cfg.max_seq_len)
    return error{errc::invalid_argument, "generate: prompt length " + std::to_string(P) +
                                             " + max_new " + std::to_string(max_new) +
                                             " must be within policy.max_seq_len " +
                                             std::to_string(cfg.max_seq_len) + " and max_new >= 1"};
  if (!(temperature > 0)) return error{errc::invalid_argument, "generate: temperature must be > 0"};
  return ok_status();
}

bool sample_step(const float* logits, int64_t num_rows, float temperature, int max_new,
                 std::mt19937_64& rng, std::vector<uint8_t>& active, generation& out) {
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  std::vector<float> logp(num_vocab);
  bool any = false;
  for (int64_t r = 0; r < num_rows; ++r) {
    if (!active[r]) continue;
    log_softmax_row(&logits[r * num_vocab], num_vocab, temperature, logp.data());
    double u = uni(rng), acc = 0;
    token_id pick = num_vocab - 1;
    for (int v = 0; v < num_vocab; ++v) {
      acc += std::exp(double(logp[v]));
      if (u < acc) {
        pick = v;
        break;
      }
    }
    out.completions[r].push_back(pick);
    out.logprobs[r].push_back(logp[pick]);
    if (pick == tok_eos || static_cast<int>(out.completions[r].size()) >= max_new) active[r] = 0;
    any = any || active[r];
  }
  return any;
}

}  // namespace detail

}  // namespace moerl::policy
