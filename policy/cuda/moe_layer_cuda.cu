// policy/moe_layer.cpp's forward and backward on the device, step for step: router GEMM,
// routing, the experts (one rank: dispatch layout + permute in place of the exchange's
// dispatch, combine in place of its combine; several ranks: the exchange itself, as the CPU
// layer), grouped expert FFN, load-balance loss; backward in reverse.
#include <numeric>

#include "kernels/cuda/kernels_cuda.h"
#include "policy/cuda/dense_ops_cuda.h"
#include "policy/cuda/device_common.cuh"
#include "policy/cuda/moe_layer_cuda.h"

namespace moerl::policy::cuda {

using kernels::cuda::detail::scratch;

status moe_layer::route(cudaStream_t stream, const moe_weights& w, const float* x,
                        const uint8_t* token_mask, int64_t n, moe_acts* st) {
  const int E = shape_.num_experts, K = shape_.top_k;
  const int64_t d = shape_.hidden;
  scratch<float> logits(stream, n * E);
  CUDA_CHECK(logits.error());
  STATUS_TRY(linear_forward(stream, x, w.router, n, d, E, logits.get()));
  STATUS_TRY(st->scores.resize(n * E));
  STATUS_TRY(st->topk_idx.resize(n * K));
  STATUS_TRY(st->topk_weights.resize(n * K));
  return kernels::cuda::route_forward(stream, routing_of(shape_), logits.get(), nullptr, token_mask,
                                      n, st->scores.get(), st->topk_idx.get(),
                                      st->topk_weights.get());
}

status moe_layer::forward(cudaStream_t stream, const moe_weights& w, const float* x,
                          const uint8_t* token_mask, int64_t n, moe_acts* st, float* y,
                          float* aux_loss, exchange_mode mode) {
  const int E = shape_.num_experts, K = shape_.top_k;
  st->num_tokens = n;
  STATUS_TRY(route(stream, w, x, token_mask, n, st));
  STATUS_TRY(exchange_ ? experts_exchanged(stream, w, x, n, mode, st, y)
                       : experts_local(stream, w, x, n, st, y));
  STATUS_TRY(st->grad_scores_aux.assign_zero(n * E, stream));
  CUDA_CHECK(cudaMemsetAsync(aux_loss, 0, sizeof(float), stream));
  if (shape_.aux_loss_coef > 0)
    STATUS_TRY(kernels::cuda::load_balance_loss(stream, st->scores.get(), st->topk_idx.get(), n, E,
                                                K, shape_.aux_loss_coef, aux_loss,
                                                st->grad_scores_aux.get()));
  return ok_status();
}

status moe_layer::experts_local(cudaStream_t stream, const moe_weights& w, const float* x,
                                int64_t n, moe_acts* st, float* y) {
  const int E = shape_.num_experts, K = shape_.top_k;
  const int64_t d = shape_.hidden, F = shape_.ffn_dim;
  // The one-rank exchange's dispatch: every routed entry becomes a row of its expert's block.
  STATUS_TRY(st->slot.resize(n * K));
  STATUS_TRY(st->offset_dev.resize(E + 1));
  STATUS_TRY(st->per_expert_dev.resize(E));
  STATUS_TRY(st->per_rank_dev.resize(1));
  STATUS_TRY(st->in_rank_dev.resize(n));
  kernels::dispatch_layout_params lp;
  lp.num_tokens = n;
  lp.topk = K;
  lp.num_experts = E;
  lp.num_ranks = 1;
  kernels::dispatch_layout_out lo;
  lo.num_tokens_per_expert = st->per_expert_dev.get();
  lo.num_tokens_per_rank = st->per_rank_dev.get();
  lo.is_token_in_rank = st->in_rank_dev.get();
  lo.expert_offset = st->offset_dev.get();
  lo.token_expert_slot = st->slot.get();
  STATUS_TRY(kernels::cuda::get_dispatch_layout(stream, st->topk_idx.get(), lp, lo));
  // The GEMM sizes, on the host (moe_layer_cuda.h: one synchronisation per layer).
  STATUS_TRY(st->offset_dev.download(&st->expert_offset, stream));
  st->num_rows = st->expert_offset[E];
  st->tokens_per_expert.resize(E);
  for (int e = 0; e < E; ++e)
    st->tokens_per_expert[e] = st->expert_offset[e + 1] - st->expert_offset[e];

  const int64_t rows = st->num_rows;
  STATUS_TRY(st->recv_x.resize(rows * d));
  STATUS_TRY(st->gate_up.resize(rows * 2 * F));
  STATUS_TRY(st->act.resize(rows * F));
  STATUS_TRY(st->recv_out.resize(rows * d));
  STATUS_TRY(
      kernels::cuda::permute_forward(stream, x, st->slot.get(), n, K, d, rows, st->recv_x.get()));
  kernels::expert_ffn_shape fs{E, d, F};
  STATUS_TRY(kernels::cuda::expert_ffn_forward(
      stream, fs, st->expert_offset.data(), st->recv_x.get(), w.w_gate_up, w.w_down,
      st->gate_up.get(), st->act.get(), st->recv_out.get()));
  return kernels::cuda::combine_forward(stream, st->recv_out.get(), st->slot.get(),
                                        st->topk_weights.get(), n, K, d, rows, y);
}

status moe_layer::experts_exchanged(cudaStream_t stream, const moe_weights& w, const float* x,
                                    int64_t n, exchange_mode mode, moe_acts* st, float* y) {
  const int E = shape_.num_experts, K = shape_.top_k;
  const int64_t d = shape_.hidden, F = shape_.ffn_dim;
  // The load statistics over global experts, counted on the host as the CPU layer does.
  STATUS_TRY(st->topk_idx.download(&st->topk_idx_host, stream));
  st->tokens_per_expert.assign(E, 0);
  for (int64_t e : st->topk_idx_host)
    if (e >= 0) ++st->tokens_per_expert[e];

  ASSIGN_OR_RETURN(st->handle,
                   exchange_->dispatch(stream, x, st->topk_idx.get(), st->topk_weights.get(), n, K,
                                       E, d, mode, &st->recv_x));
  const int64_t rows = st->handle.num_recv_rows;
  st->num_rows = rows;
  st->expert_offset = st->handle.local_expert_offset;
  STATUS_TRY(st->gate_up.resize(rows * 2 * F));
  STATUS_TRY(st->act.resize(rows * F));
  STATUS_TRY(st->recv_out.resize(rows * d));
  kernels::expert_ffn_shape fs{num_local_experts(), d, F};
  STATUS_TRY(kernels::cuda::expert_ffn_forward(
      stream, fs, st->expert_offset.data(), st->recv_x.get(), w.w_gate_up, w.w_down,
      st->gate_up.get(), st->act.get(), st->recv_out.get()));
  // What backward's one-term combine_backward reads (uploaded once per forward).
  STATUS_TRY(st->recv_weights.upload(st->handle.recv_weights, stream));
  std::vector<int64_t> own(static_cast<size_t>(rows));
  std::iota(own.begin(), own.end(), int64_t{0});
  STATUS_TRY(st->own_row.upload(own, stream));
  return exchange_->combine(stream, st->handle, st->recv_out.get(), d, mode, y);
}

status moe_layer::backward(cudaStream_t stream, const moe_weights& w, const float* x,
                           const moe_acts& st, const float* dy, float* dx, const moe_grads& g,
                           exchange_mode mode) {
  const int E = shape_.num_experts, K = shape_.top_k;
  const int64_t d = shape_.hidden, n = st.num_tokens;
  scratch<float> grad_topk_w(stream, n * K), grad_logits(stream, n * E), dx_router(stream, n * d);
  for (auto err : {grad_topk_w.error(), grad_logits.error(), dx_router.error()}) CUDA_CHECK(err);
  STATUS_TRY(exchange_
                 ? experts_exchanged_backward(stream, w, st, dy, mode, dx, grad_topk_w.get(), g)
                 : experts_local_backward(stream, w, st, dy, dx, grad_topk_w.get(), g));
  STATUS_TRY(kernels::cuda::route_backward(
      stream, routing_of(shape_), st.scores.get(), st.topk_idx.get(), grad_topk_w.get(),
      shape_.aux_loss_coef > 0 ? st.grad_scores_aux.get() : nullptr, n, grad_logits.get()));
  STATUS_TRY(
      linear_backward(stream, x, w.router, grad_logits.get(), n, d, E, dx_router.get(), g.router));
  return add_inplace(stream, dx, dx_router.get(), n * d);
}

status moe_layer::experts_local_backward(cudaStream_t stream, const moe_weights& w,
                                         const moe_acts& st, const float* dy, float* dx,
                                         float* grad_topk_w, const moe_grads& g) {
  const int E = shape_.num_experts, K = shape_.top_k;
  const int64_t d = shape_.hidden, F = shape_.ffn_dim, n = st.num_tokens, rows = st.num_rows;
  // y[t] = sum_k w[t,k] out(t,k): the gradient of each expert row is w * dy[t], of each
  // weight dot(dy[t], out(t,k)) (the one-rank exchange's dispatch_cached + combine_backward).
  scratch<float> grad_recv_out(stream, rows * d), grad_recv_x(stream, rows * d);
  for (auto err : {grad_recv_out.error(), grad_recv_x.error()}) CUDA_CHECK(err);
  STATUS_TRY(kernels::cuda::combine_backward(stream, dy, st.recv_out.get(), st.slot.get(),
                                             st.topk_weights.get(), n, K, d, rows,
                                             grad_recv_out.get(), grad_topk_w));
  kernels::expert_ffn_shape fs{E, d, F};
  STATUS_TRY(kernels::cuda::expert_ffn_backward(
      stream, fs, st.expert_offset.data(), st.recv_x.get(), w.w_gate_up, w.w_down, st.gate_up.get(),
      st.act.get(), grad_recv_out.get(), grad_recv_x.get(), g.w_gate_up, g.w_down,
      /*accumulate_weight_grads=*/true));
  // The exchange's dispatch_backward: each token's rows summed back in k order.
  return kernels::cuda::permute_backward(stream, grad_recv_x.get(), st.slot.get(), n, K, d, rows,
                                         dx);
}

status moe_layer::experts_exchanged_backward(cudaStream_t stream, const moe_weights& w,
                                             const moe_acts& st, const float* dy,
                                             exchange_mode mode, float* dx, float* grad_topk_w,
                                             const moe_grads& g) {
  const int64_t d = shape_.hidden, F = shape_.ffn_dim, rows = st.num_rows;
  // policy/moe_layer.cpp's backward: dy travels to the experts like the tokens did; each
  // received row is a one-term combine (its gradient w * dy, its weight's dot(dy, out)).
  device_buffer<float> recv_dy;
  STATUS_TRY(exchange_->dispatch_cached(stream, st.handle, dy, d, mode, &recv_dy));
  scratch<float> grad_recv_out(stream, rows * d), grad_recv_w(stream, rows),
      grad_recv_x(stream, rows * d);
  for (auto err : {grad_recv_out.error(), grad_recv_w.error(), grad_recv_x.error()})
    CUDA_CHECK(err);
  STATUS_TRY(kernels::cuda::combine_backward(stream, recv_dy.get(), st.recv_out.get(),
                                             st.own_row.get(), st.recv_weights.get(), rows, 1, d,
                                             rows, grad_recv_out.get(), grad_recv_w.get()));
  kernels::expert_ffn_shape fs{num_local_experts(), d, F};
  STATUS_TRY(kernels::cuda::expert_ffn_backward(
      stream, fs, st.expert_offset.data(), st.recv_x.get(), w.w_gate_up, w.w_down, st.gate_up.get(),
      st.act.get(), grad_recv_out.get(), grad_recv_x.get(), g.w_gate_up, g.w_down,
      /*accumulate_weight_grads=*/true));
  return exchange_->dispatch_backward(stream, st.handle, grad_recv_x.get(), grad_recv_w.get(), d,
                                      mode, dx, grad_topk_w);
}

}  // namespace moerl::policy::cuda
