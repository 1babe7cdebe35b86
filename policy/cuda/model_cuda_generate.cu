// The device policy's generation (model_cuda.h): policy/model.cpp's generate op for op, with
// the KV cache in device memory and each step's logits copied back for host-side sampling
// (policy::detail::sample_step, shared with the CPU policy).
#include "policy/cuda/dense_ops_cuda.h"
#include "policy/cuda/device_common.cuh"
#include "policy/cuda/model_cuda.h"
#include "policy/internal/model_common.h"

namespace moerl::policy::cuda {

result<generation> moe_policy::generate(const std::vector<std::vector<token_id>>& prompts,
                                        int max_new, float temperature, std::mt19937_64& rng) {
  const model_config& c = cfg();
  const int64_t B = prompts.size(), d = c.d_model;
  const int H = c.num_heads, dh = c.d_model / c.num_heads;
  cudaStream_t s = stream_;
  if (B == 0) return generation{};
  STATUS_TRY(policy::detail::check_generate_args(c, prompts, max_new, temperature));
  const int64_t P = prompts[0].size(), T = P + max_new;

  std::vector<device_buffer<float>> k_cache(c.num_layers), v_cache(c.num_layers);
  for (int l = 0; l < c.num_layers; ++l) {
    STATUS_TRY(k_cache[l].assign_zero(B * T * d, s));
    STATUS_TRY(v_cache[l].assign_zero(B * T * d, s));
  }
  device_buffer<float> x, h, inv, qkv, q, o, proj, y, logits, aux;
  for (auto* buf : {&x, &h, &q, &o, &proj, &y}) STATUS_TRY(buf->resize(B * d));
  STATUS_TRY(inv.resize(B));
  STATUS_TRY(qkv.resize(B * 3 * d));
  STATUS_TRY(logits.resize(B * num_vocab));
  STATUS_TRY(aux.resize(1));  // decode ignores the aux loss; the layer writes one anyway
  device_buffer<token_id> input_dev;
  device_buffer<uint8_t> active_dev;
  std::vector<float> logits_host;
  moe_acts scratch;

  generation out;
  out.completions.resize(B);
  out.logprobs.resize(B);
  std::vector<uint8_t> active(B, 1);
  std::vector<token_id> input(B);
  for (int64_t pos = 0; pos + 1 < T; ++pos) {
    for (int64_t r = 0; r < B; ++r)
      input[r] = pos < P ? prompts[r][pos] : (active[r] ? out.completions[r].back() : tok_pad);
    STATUS_TRY(input_dev.upload(input, s));
    STATUS_TRY(active_dev.upload(active, s));
    STATUS_TRY(embed_forward(s, p(tok_emb_), p(pos_emb_), input_dev.get(), B, 1, pos, d, x.get()));
    for (int l = 0; l < c.num_layers; ++l) {
      const auto& lo = lo_[l];
      STATUS_TRY(rmsnorm_forward(s, x.get(), p(lo.norm1), B, d, h.get(), inv.get()));
      STATUS_TRY(linear_forward(s, h.get(), p(lo.wqkv), B, d, 3 * d, qkv.get()));
      // Row r's query to q, its key and value to cache position pos (strided copies).
      const size_t fs = sizeof(float);
      CUDA_CHECK(cudaMemcpy2DAsync(q.get(), d * fs, qkv.get(), 3 * d * fs, d * fs, B,
                                   cudaMemcpyDeviceToDevice, s));
      CUDA_CHECK(cudaMemcpy2DAsync(k_cache[l].get() + pos * d, T * d * fs, qkv.get() + d,
                                   3 * d * fs, d * fs, B, cudaMemcpyDeviceToDevice, s));
      CUDA_CHECK(cudaMemcpy2DAsync(v_cache[l].get() + pos * d, T * d * fs, qkv.get() + 2 * d,
                                   3 * d * fs, d * fs, B, cudaMemcpyDeviceToDevice, s));
      STATUS_TRY(attention_decode(s, q.get(), k_cache[l].get(), v_cache[l].get(), B, T, pos, H, dh,
                                  o.get()));
      STATUS_TRY(linear_forward(s, o.get(), p(lo.wo), B, d, d, proj.get()));
      STATUS_TRY(add_inplace(s, x.get(), proj.get(), B * d));
      STATUS_TRY(rmsnorm_forward(s, x.get(), p(lo.norm2), B, d, h.get(), inv.get()));
      STATUS_TRY(moe_[l].forward(s, moe_weights_of(l), h.get(), active_dev.get(), B, &scratch,
                                 y.get(), aux.get(), exchange_mode::low_latency));
      STATUS_TRY(add_inplace(s, x.get(), y.get(), B * d));
    }
    if (pos + 1 < P) continue;  // still reading the prompt
    STATUS_TRY(rmsnorm_forward(s, x.get(), p(norm_f_), B, d, h.get(), inv.get()));
    STATUS_TRY(linear_forward(s, h.get(), p(head_), B, d, num_vocab, logits.get()));
    // The step's one activation copy to the host: sampling draws from the caller's rng.
    STATUS_TRY(logits.download(&logits_host, s));
    const bool any =
        policy::detail::sample_step(logits_host.data(), B, temperature, max_new, rng, active, out);
    // With several ranks every rank keeps stepping (the exchange is collective, and other
    // ranks may still have live rows); alone, stop as soon as every row is done.
    if (!any && num_expert_ranks() == 1) break;
  }
  return out;
}

}  // namespace moerl::policy::cuda
