#include "policy/moe_layer.h"

#include <algorithm>

#include "common/status_try.h"
#include "kernels/combine.h"
#include "kernels/expert_ffn.h"
#include "kernels/load_stats.h"
#include "kernels/routing.h"
#include "policy/dense_ops.h"

namespace moerl::policy {

moe_layer::moe_layer(const moe_shape& shape, kernels::thread_pool& pool, expert_exchange& exchange)
    : shape_(shape), pool_(pool), exchange_(exchange) {}

kernels::routing_params routing_of(const moe_shape& s) {
  kernels::routing_params p;
  p.num_experts = s.num_experts;
  p.topk = s.top_k;
  p.scoring = kernels::score_function::softmax;
  p.renormalize = true;
  return p;
}

status moe_layer::forward(const moe_weights& w, const float* x, const uint8_t* token_mask,
                          int64_t n, exchange_mode mode, moe_state* st, float* y) {
  const int E = shape_.num_experts, K = shape_.top_k;
  const int64_t d = shape_.hidden;
  st->num_tokens = n;

  std::vector<float> logits(n * E);
  linear_forward(x, w.router, n, d, E, logits.data());
  st->scores.resize(n * E);
  st->topk_idx.resize(n * K);
  st->topk_weights.resize(n * K);
  STATUS_TRY(kernels::route_forward(pool_, routing_of(shape_), logits.data(), nullptr, token_mask,
                                    n, st->scores.data(), st->topk_idx.data(),
                                    st->topk_weights.data()));

  st->tokens_per_expert.assign(E, 0);
  for (int64_t i = 0; i < n * K; ++i)
    if (st->topk_idx[i] >= 0) ++st->tokens_per_expert[st->topk_idx[i]];

  auto handle = exchange_.dispatch(x, st->topk_idx.data(), st->topk_weights.data(), n, K, E, d,
                                   mode, &st->recv_x);
  if (!handle) return handle.err();
  st->handle = std::move(*handle);

  const int64_t recv = st->handle.num_recv_rows, F = shape_.ffn_dim;
  st->gate_up.resize(recv * 2 * F);
  st->act.resize(recv * F);
  st->recv_out.resize(recv * d);
  kernels::expert_ffn_shape fs{num_local_experts(), d, F};
  STATUS_TRY(kernels::expert_ffn_forward(pool_, fs, st->handle.local_expert_offset.data(),
                                         st->recv_x.data(), w.w_gate_up, w.w_down,
                                         st->gate_up.data(), st->act.data(), st->recv_out.data()));
  STATUS_TRY(exchange_.combine(st->handle, st->recv_out.data(), d, mode, y));

  st->aux_loss = 0;
  st->grad_scores_aux.assign(n * E, 0.0f);
  if (shape_.aux_loss_coef > 0)
    STATUS_TRY(kernels::load_balance_loss(pool_, st->scores.data(), st->topk_idx.data(), n, E, K,
                                          shape_.aux_loss_coef, &st->aux_loss,
                                          st->grad_scores_aux.data()));
  return ok_status();
}

status moe_layer::backward(const moe_weights& w, const float* x, const moe_state& st,
                           const float* dy, exchange_mode mode, float* dx, const moe_grads& g) {
  const int E = shape_.num_experts, K = shape_.top_k;
  const int64_t d = shape_.hidden, F = shape_.ffn_dim, n = st.num_tokens;
  const int64_t recv = st.handle.num_recv_rows;

  // y[t] = sum_k w[t,k] * out(t,k): each received row is one (token, k) term, so the
  // combine's backward runs on this rank's rows as a one-term combine per row: the output's
  // gradient is w * dy, the weight's is dot(dy, out) (both computed where out lives).
  std::vector<float> recv_dy;
  STATUS_TRY(exchange_.dispatch_cached(st.handle, dy, d, mode, &recv_dy));
  std::vector<int64_t> own_row(recv);
  for (int64_t i = 0; i < recv; ++i) own_row[i] = i;
  std::vector<float> grad_recv_out(recv * d), grad_recv_w(recv);
  STATUS_TRY(kernels::combine_backward(pool_, recv_dy.data(), st.recv_out.data(), own_row.data(),
                                       st.handle.recv_weights.data(), recv, 1, d, recv,
                                       grad_recv_out.data(), grad_recv_w.data()));
  std::vector<float> grad_recv_x(recv * d);
  kernels::expert_ffn_shape fs{num_local_experts(), d, F};
  STATUS_TRY(kernels::expert_ffn_backward(
      pool_, fs, st.handle.local_expert_offset.data(), st.recv_x.data(), w.w_gate_up, w.w_down,
      st.gate_up.data(), st.act.data(), grad_recv_out.data(), grad_recv_x.data(), g.w_gate_up,
      g.w_down, /*accumulate_weight_grads=*/true));

  std::vector<float> grad_topk_w(n * K);
  STATUS_TRY(exchange_.dispatch_backward(st.handle, grad_recv_x.data(), grad_recv_w.data(), d, mode,
                                         dx, grad_topk_w.data()));

  std::vector<float> grad_logits(n * E);
  STATUS_TRY(kernels::route_backward(
      pool_, routing_of(shape_), st.scores.data(), st.topk_idx.data(), grad_topk_w.data(),
      shape_.aux_loss_coef > 0 ? st.grad_scores_aux.data() : nullptr, n, grad_logits.data()));
  // dx += dlogits * router^T; router grad += x^T * dlogits
  std::vector<float> dx_router(n * d);
  linear_backward(x, w.router, grad_logits.data(), n, d, E, dx_router.data(), g.router);
  for (int64_t i = 0; i < n * d; ++i) dx[i] += dx_router[i];
  return ok_status();
}

}  // namespace moerl::policy
