// The device policy's construction, parameter transfers and training forward (model_cuda.h);
// forward is policy/model.cpp's forward op for op.
#include "policy/cuda/dense_ops_cuda.h"
#include "policy/cuda/device_common.cuh"
#include "policy/cuda/model_cuda.h"
#include "policy/internal/model_common.h"

namespace moerl::policy::cuda {

result<std::unique_ptr<moe_policy>> moe_policy::create(const model_config& cfg) {
  std::unique_ptr<moe_policy> m(new moe_policy());
  m->host_exchange_ = make_local_expert_exchange();
  STATUS_TRY(m->init(cfg, *m->host_exchange_));
  return result<std::unique_ptr<moe_policy>>(std::move(m));
}

result<std::unique_ptr<moe_policy>> moe_policy::create(
    const model_config& cfg, expert_exchange& rank_exchange,
    std::unique_ptr<device_expert_exchange> device_exchange) {
  if (!device_exchange || device_exchange->num_ranks() != rank_exchange.num_ranks() ||
      device_exchange->rank() != rank_exchange.rank())
    return error{errc::invalid_argument,
                 "device policy of an expert-parallel rank: the device exchange is " +
                     std::string(device_exchange ? "of another group than" : "missing beside") +
                     " the rank's host exchange (rank " + std::to_string(rank_exchange.rank()) +
                     " of " + std::to_string(rank_exchange.num_ranks()) + ")"};
  std::unique_ptr<moe_policy> m(new moe_policy());
  m->device_exchange_ = std::move(device_exchange);
  STATUS_TRY(m->init(cfg, rank_exchange));
  return result<std::unique_ptr<moe_policy>>(std::move(m));
}

status moe_policy::init(const model_config& cfg, expert_exchange& layout_exchange) {
  // The host mirror: this rank's layout (every expert, or its share) and initial values.
  ASSIGN_OR_RETURN(host_, policy::moe_policy::create(cfg, layout_exchange));
  // A blocking stream (not cudaStreamNonBlocking): work its users put on the legacy default
  // stream (cuda::adam::create's cudaMemset of the moments, a test's cudaMemcpy) is ordered
  // before what this stream runs next, with no explicit synchronisation.
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamDefault));
  STATUS_TRY(params_.upload(host_->params(), stream_));
  tok_emb_ = offset_of("tok_emb");
  pos_emb_ = offset_of("pos_emb");
  norm_f_ = offset_of("norm_f");
  head_ = offset_of("head");
  moe_shape s{cfg.num_experts, cfg.top_k, cfg.d_model, cfg.ffn_dim, cfg.aux_loss_coef};
  for (int l = 0; l < cfg.num_layers; ++l) {
    const std::string pre = "layer" + std::to_string(l) + ".";
    lo_.push_back({offset_of(pre + "norm1"), offset_of(pre + "attn.wqkv"),
                   offset_of(pre + "attn.wo"), offset_of(pre + "norm2"),
                   offset_of(pre + "moe.router"), offset_of(pre + "moe.w_gate_up"),
                   offset_of(pre + "moe.w_down")});
    moe_.emplace_back(s, device_exchange_.get());
  }
  return ok_status();
}

moe_policy::~moe_policy() {
  // Buffers free themselves (cudaFree synchronises); the stream goes last.
  params_ = device_buffer<float>();
  if (stream_) cudaStreamDestroy(stream_);
}

size_t moe_policy::offset_of(const std::string& name) const {
  const tensor_spec* t = host_->layout().find(name);
  // The names are model.cpp's build_layout's; a missing one is a bug here, not bad input.
  if (!t) std::abort();
  return t->offset;
}

moe_weights moe_policy::moe_weights_of(int l) const {
  return {p(lo_[l].router), p(lo_[l].w_gate_up), p(lo_[l].w_down)};
}

result<std::vector<float>> moe_policy::params_host() const {
  std::vector<float> h;
  STATUS_TRY(params_.download(&h, stream_));
  return h;
}

status moe_policy::params_from_host(const std::vector<float>& params) {
  if (params.size() != num_params())
    return error{errc::invalid_argument, "device policy: " + std::to_string(params.size()) +
                                             " parameters given, the layout holds " +
                                             std::to_string(num_params())};
  return params_.upload(params, stream_);
}

status moe_policy::copy_params_from(const moe_policy& other) {
  if (!(other.layout() == layout()))
    return error{errc::invalid_argument, "device policy: copy_params_from another layout"};
  CUDA_CHECK(cudaStreamSynchronize(other.stream_));  // other's pending updates land first
  return params_.copy_from(other.params_, stream_);
}

result<std::string> moe_policy::serialize() const {
  STATUS_TRY(params_.download(&host_->params(), stream_));
  return host_->serialize();
}

result<std::string> moe_policy::content_hash() const {
  ASSIGN_OR_RETURN(std::string bytes, serialize());
  return policy::content_hash(bytes);
}

status moe_policy::load(const std::string& bytes) {
  STATUS_TRY(host_->load(bytes));
  return params_.upload(host_->params(), stream_);
}

status moe_policy::forward(const std::vector<token_id>& tokens, int64_t b, int64_t t,
                           forward_state* st, const std::vector<uint8_t>& mask) {
  const model_config& c = cfg();
  const int64_t d = c.d_model, n = b * t;
  const int H = c.num_heads, dh = c.d_model / c.num_heads;
  cudaStream_t s = stream_;
  STATUS_TRY(policy::detail::check_forward_args(c, tokens, b, t, mask));
  st->batch = b;
  st->seq_len = t;
  STATUS_TRY(st->tokens.upload(tokens, s));
  STATUS_TRY(st->mask.upload(mask.empty() ? std::vector<uint8_t>(n, 1) : mask, s));

  device_buffer<float> x, proj, y;
  STATUS_TRY(x.resize(n * d));
  STATUS_TRY(proj.resize(n * d));
  STATUS_TRY(y.resize(n * d));
  STATUS_TRY(embed_forward(s, p(tok_emb_), p(pos_emb_), st->tokens.get(), n, t, 0, d, x.get()));
  st->layers.resize(c.num_layers);
  STATUS_TRY(st->d_aux.resize(c.num_layers));
  for (int l = 0; l < c.num_layers; ++l) {
    auto& a = st->layers[l];
    const auto& o = lo_[l];
    STATUS_TRY(a.x_in.copy_from(x, s));
    STATUS_TRY(a.h1.resize(n * d));
    STATUS_TRY(a.inv1.resize(n));
    STATUS_TRY(rmsnorm_forward(s, x.get(), p(o.norm1), n, d, a.h1.get(), a.inv1.get()));
    STATUS_TRY(a.qkv.resize(n * 3 * d));
    STATUS_TRY(linear_forward(s, a.h1.get(), p(o.wqkv), n, d, 3 * d, a.qkv.get()));
    STATUS_TRY(a.probs.resize(b * H * t * t));
    STATUS_TRY(a.attn.resize(n * d));
    STATUS_TRY(attention_forward(s, a.qkv.get(), b, t, H, dh, a.probs.get(), a.attn.get()));
    STATUS_TRY(linear_forward(s, a.attn.get(), p(o.wo), n, d, d, proj.get()));
    STATUS_TRY(add_inplace(s, x.get(), proj.get(), n * d));
    STATUS_TRY(a.x_mid.copy_from(x, s));
    STATUS_TRY(a.h2.resize(n * d));
    STATUS_TRY(a.inv2.resize(n));
    STATUS_TRY(rmsnorm_forward(s, x.get(), p(o.norm2), n, d, a.h2.get(), a.inv2.get()));
    STATUS_TRY(moe_[l].forward(s, moe_weights_of(l), a.h2.get(), st->mask.get(), n, &a.moe, y.get(),
                               st->d_aux.get() + l));
    STATUS_TRY(add_inplace(s, x.get(), y.get(), n * d));
  }
  STATUS_TRY(st->x_final.copy_from(x, s));
  STATUS_TRY(st->h_final.resize(n * d));
  STATUS_TRY(st->inv_final.resize(n));
  STATUS_TRY(rmsnorm_forward(s, x.get(), p(norm_f_), n, d, st->h_final.get(), st->inv_final.get()));
  STATUS_TRY(st->d_logits.resize(n * num_vocab));
  STATUS_TRY(linear_forward(s, st->h_final.get(), p(head_), n, d, num_vocab, st->d_logits.get()));
  // The host copies the GRPO loss reads (model_cuda.h).
  STATUS_TRY(st->d_logits.download(&st->logits, s));
  std::vector<float> aux;
  STATUS_TRY(st->d_aux.download(&aux, s));
  st->aux_loss = 0;
  for (float v : aux) st->aux_loss += v;  // layer order, as the CPU's forward adds them
  return ok_status();
}

}  // namespace moerl::policy::cuda
