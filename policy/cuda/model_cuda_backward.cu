// The device policy's backward (model_cuda.h): policy/model.cpp's backward op for op.
#include "policy/cuda/dense_ops_cuda.h"
#include "policy/cuda/device_common.cuh"
#include "policy/cuda/model_cuda.h"

namespace moerl::policy::cuda {

status moe_policy::backward(forward_state& st, const std::vector<float>& dlogits,
                            device_buffer<float>* grads) {
  const model_config& c = cfg();
  const int64_t d = c.d_model, b = st.batch, t = st.seq_len, n = b * t;
  const int H = c.num_heads, dh = c.d_model / c.num_heads;
  cudaStream_t s = stream_;
  if (static_cast<int64_t>(dlogits.size()) != n * num_vocab)
    return error{errc::invalid_argument, "policy backward: dlogits has " +
                                             std::to_string(dlogits.size()) + " values, expected " +
                                             std::to_string(n * num_vocab)};
  if (grads->size() < num_params()) STATUS_TRY(grads->assign_zero(num_params(), s));
  float* g = grads->get();

  device_buffer<float> dlog, dh_, dx, dh2, dattn, dqkv, dh1;
  STATUS_TRY(dlog.upload(dlogits, s));
  for (auto* buf : {&dh_, &dh2, &dattn, &dh1}) STATUS_TRY(buf->resize(n * d));
  STATUS_TRY(dx.assign_zero(n * d, s));
  STATUS_TRY(dqkv.resize(n * 3 * d));
  STATUS_TRY(linear_backward(s, st.h_final.get(), p(head_), dlog.get(), n, d, num_vocab, dh_.get(),
                             g + head_));
  STATUS_TRY(rmsnorm_backward(s, st.x_final.get(), p(norm_f_), st.inv_final.get(), dh_.get(), n, d,
                              dx.get(), g + norm_f_));
  for (int l = c.num_layers - 1; l >= 0; --l) {
    auto& a = st.layers[l];
    const auto& o = lo_[l];
    // x_out = x_mid + moe(h2): dx flows to x_mid directly and through the MoE.
    moe_grads mg{g + o.router, g + o.w_gate_up, g + o.w_down};
    STATUS_TRY(moe_[l].backward(s, moe_weights_of(l), a.h2.get(), a.moe, dx.get(), dh2.get(), mg));
    STATUS_TRY(rmsnorm_backward(s, a.x_mid.get(), p(o.norm2), a.inv2.get(), dh2.get(), n, d,
                                dx.get(), g + o.norm2));
    // x_mid = x_in + attn * wo
    STATUS_TRY(linear_backward(s, a.attn.get(), p(o.wo), dx.get(), n, d, d, dattn.get(), g + o.wo));
    STATUS_TRY(
        attention_backward(s, a.qkv.get(), a.probs.get(), dattn.get(), b, t, H, dh, dqkv.get()));
    STATUS_TRY(
        linear_backward(s, a.h1.get(), p(o.wqkv), dqkv.get(), n, d, 3 * d, dh1.get(), g + o.wqkv));
    STATUS_TRY(rmsnorm_backward(s, a.x_in.get(), p(o.norm1), a.inv1.get(), dh1.get(), n, d,
                                dx.get(), g + o.norm1));
  }
  STATUS_TRY(embed_backward(s, st.tokens.get(), dx.get(), n, t, d, g + tok_emb_, g + pos_emb_));
  // The local buffers above free at return (cudaFree synchronises): the stream has run.
  return ok_status();
}

}  // namespace moerl::policy::cuda
