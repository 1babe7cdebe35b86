// The policy's dense ops on the CPU, op by op (policy/dense_ops.h, policy/adam.h): the
// semantics their CUDA twins (policy/cuda/) are compared against. The model-level tests
// (gradient_test, torch_reference_test) check the ops composed; these pin each contract:
// what is overwritten and what accumulates, decode against the full forward, backward
// against finite differences, Adam's documented first step and clipping.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "policy/adam.h"
#include "policy/dense_ops.h"
#include "tests/kernels/test_util.h"

namespace moerl::policy {
namespace {

using kernels::testing::random_floats;

// Central differences of a scalar function of x, in float (the ops are fp32).
std::vector<double> numeric_gradient(std::vector<float> x, const std::function<double()>& loss,
                                     std::vector<float>& live, float h) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    live[i] = x[i] + h;
    const double up = loss();
    live[i] = x[i] - h;
    const double down = loss();
    live[i] = x[i];
    g[i] = (up - down) / (2.0 * h);
  }
  return g;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

TEST(policy_dense_ops, linear_backward_overwrites_dx_and_accumulates_dw) {
  const int64_t n = 5, d_in = 7, d_out = 3;
  auto x = random_floats(n * d_in, 1), w = random_floats(d_in * d_out, 2);
  auto dy = random_floats(n * d_out, 3), dw0 = random_floats(d_in * d_out, 4);
  std::vector<float> y(n * d_out), dx(n * d_in, 99.0f), dw = dw0;
  linear_forward(x.data(), w.data(), n, d_in, d_out, y.data());
  linear_backward(x.data(), w.data(), dy.data(), n, d_in, d_out, dx.data(), dw.data());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < d_out; ++o) {
      double want = 0;
      for (int64_t i = 0; i < d_in; ++i) want += double(x[r * d_in + i]) * w[i * d_out + o];
      EXPECT_NEAR(y[r * d_out + o], want, 1e-5);
    }
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < d_in; ++i) {
      double want = 0;
      for (int64_t o = 0; o < d_out; ++o) want += double(dy[r * d_out + o]) * w[i * d_out + o];
      EXPECT_NEAR(dx[r * d_in + i], want, 1e-5);
    }
  for (int64_t i = 0; i < d_in; ++i)
    for (int64_t o = 0; o < d_out; ++o) {
      double want = dw0[i * d_out + o];
      for (int64_t r = 0; r < n; ++r) want += double(x[r * d_in + i]) * dy[r * d_out + o];
      EXPECT_NEAR(dw[i * d_out + o], want, 1e-5);
    }
  // dx null: only dw moves (by the same amount again).
  std::vector<float> dw2 = dw;
  linear_backward(x.data(), w.data(), dy.data(), n, d_in, d_out, nullptr, dw2.data());
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_NEAR(dw2[i] - dw[i], dw[i] - dw0[i], 1e-5);
}

TEST(policy_dense_ops, rmsnorm_backward_accumulates_the_finite_difference_gradient) {
  const int64_t n = 3, d = 8;
  auto x = random_floats(n * d, 5, -2, 2), g = random_floats(d, 6, 0.5f, 1.5f);
  auto r = random_floats(n * d, 7);  // loss = sum(y * r)
  std::vector<float> y(n * d), inv(n);
  rmsnorm_forward(x.data(), g.data(), n, d, y.data(), inv.data());
  for (int64_t row = 0; row < n; ++row) {
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += double(x[row * d + i]) * x[row * d + i];
    EXPECT_NEAR(inv[row], 1.0 / std::sqrt(ss / d + rmsnorm_eps), 1e-6);
  }
  auto dx0 = random_floats(n * d, 8), dg0 = random_floats(d, 9);
  std::vector<float> dx = dx0, dg = dg0;
  rmsnorm_backward(x.data(), g.data(), inv.data(), r.data(), n, d, dx.data(), dg.data());
  std::vector<float> live_x = x, live_g = g;
  auto loss = [&] {
    std::vector<float> yy(n * d), ii(n);
    rmsnorm_forward(live_x.data(), live_g.data(), n, d, yy.data(), ii.data());
    return dot(yy, r);
  };
  auto nx = numeric_gradient(x, loss, live_x, 1e-2f);
  auto ng = numeric_gradient(g, loss, live_g, 1e-2f);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(dx[i] - dx0[i], nx[i], 2e-3) << "dx " << i;
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(dg[i] - dg0[i], ng[i], 2e-3) << "dg " << i;
}

TEST(policy_dense_ops, attention_is_causal_and_its_backward_matches_finite_differences) {
  const int64_t b = 2, t = 5;
  const int heads = 2, d_head = 3;
  const int64_t d = heads * d_head;
  auto qkv = random_floats(b * t * 3 * d, 10, -1, 1), r = random_floats(b * t * d, 11);
  std::vector<float> probs(b * heads * t * t, 5.0f), out(b * t * d);
  attention_forward(qkv.data(), b, t, heads, d_head, probs.data(), out.data());
  for (int64_t row = 0; row < b * heads * t; ++row) {
    const int64_t i = row % t;
    double sum = 0;
    for (int64_t j = 0; j < t; ++j) {
      if (j > i) {
        EXPECT_EQ(probs[row * t + j], 0.0f) << "row " << row << " col " << j;
      }
      sum += probs[row * t + j];
    }
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
  std::vector<float> dqkv(qkv.size(), 42.0f);  // overwritten
  attention_backward(qkv.data(), probs.data(), r.data(), b, t, heads, d_head, dqkv.data());
  std::vector<float> live = qkv;
  auto loss = [&] {
    std::vector<float> p(probs.size()), o(out.size());
    attention_forward(live.data(), b, t, heads, d_head, p.data(), o.data());
    return dot(o, r);
  };
  auto num = numeric_gradient(qkv, loss, live, 1e-2f);
  for (size_t i = 0; i < qkv.size(); ++i) EXPECT_NEAR(dqkv[i], num[i], 2e-3) << "dqkv " << i;
}

TEST(policy_dense_ops, attention_decode_equals_the_full_forward_row_at_each_position) {
  const int64_t b = 3, t = 9;
  const int heads = 2, d_head = 4;
  const int64_t d = heads * d_head;
  auto qkv = random_floats(b * t * 3 * d, 12, -2, 2);
  std::vector<float> probs(b * heads * t * t), out(b * t * d);
  attention_forward(qkv.data(), b, t, heads, d_head, probs.data(), out.data());
  // The KV cache holds every position's key and value; decoding position pos sees 0..pos.
  std::vector<float> k(b * t * d), v(b * t * d);
  for (int64_t row = 0; row < b * t; ++row)
    for (int64_t c = 0; c < d; ++c) {
      k[row * d + c] = qkv[row * 3 * d + d + c];
      v[row * d + c] = qkv[row * 3 * d + 2 * d + c];
    }
  for (int64_t pos = 0; pos < t; ++pos) {
    std::vector<float> q(b * d), o(b * d);
    for (int64_t s = 0; s < b; ++s)
      for (int64_t c = 0; c < d; ++c) q[s * d + c] = qkv[(s * t + pos) * 3 * d + c];
    attention_decode(q.data(), k.data(), v.data(), b, t, pos, heads, d_head, o.data());
    for (int64_t s = 0; s < b; ++s)
      for (int64_t c = 0; c < d; ++c)
        EXPECT_FLOAT_EQ(o[s * d + c], out[(s * t + pos) * d + c]) << "pos " << pos;
  }
}

TEST(policy_dense_ops, log_softmax_row_normalises_at_the_temperature) {
  auto logits = random_floats(50, 13, -6, 6);
  for (float temperature : {1.0f, 0.5f, 4.0f}) {
    std::vector<float> out(50);
    log_softmax_row(logits.data(), 50, temperature, out.data());
    double z = 0;
    for (float l : logits) z += std::exp(double(l) / temperature);
    double total = 0;
    for (int i = 0; i < 50; ++i) {
      EXPECT_NEAR(out[i], double(logits[i]) / temperature - std::log(z), 1e-5);
      total += std::exp(double(out[i]));
    }
    EXPECT_NEAR(total, 1.0, 1e-5);
  }
}

// Step 1 of Adam with bias correction moves each parameter by lr * g / (|g| + eps'): about
// lr against the gradient's sign, whatever its size; clipping scales the gradient the moments
// see by grad_clip / norm.
// Training rows take position i % t; a decode step (t = 1) takes pos0 for every row.
TEST(policy_dense_ops, embed_forward_adds_token_and_position_rows) {
  const int64_t d = 3, t = 4, n = 8;
  auto tok = random_floats(num_vocab * d, 30), pos = random_floats(6 * d, 31);
  std::vector<token_id> tokens{1, 5, 0, 15, 2, 2, 7, 9};
  std::vector<float> x(n * d);
  embed_forward(tok.data(), pos.data(), tokens.data(), n, t, 0, d, x.data());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < d; ++c)
      EXPECT_EQ(x[i * d + c], tok[tokens[i] * d + c] + pos[(i % t) * d + c]) << i << "," << c;
  std::vector<float> step(3 * d);
  embed_forward(tok.data(), pos.data(), tokens.data(), 3, 1, 5, d, step.data());
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < d; ++c)
      EXPECT_EQ(step[r * d + c], tok[tokens[r] * d + c] + pos[5 * d + c]);
}

// Both gradients accumulate, a token seen twice gets both rows, in row order.
TEST(policy_dense_ops, embed_backward_accumulates_rows_in_order_and_add_inplace_adds) {
  const int64_t d = 2, t = 3, n = 6;
  std::vector<token_id> tokens{4, 4, 1, 4, 0, 1};
  auto dx = random_floats(n * d, 32);
  std::vector<float> g_tok(num_vocab * d, 0.5f), g_pos(t * d, -0.25f);
  embed_backward(tokens.data(), dx.data(), n, t, d, g_tok.data(), g_pos.data());
  for (int64_t c = 0; c < d; ++c) {
    EXPECT_EQ(g_tok[4 * d + c], ((0.5f + dx[0 * d + c]) + dx[1 * d + c]) + dx[3 * d + c]);
    EXPECT_EQ(g_tok[1 * d + c], (0.5f + dx[2 * d + c]) + dx[5 * d + c]);
    EXPECT_EQ(g_tok[0 * d + c], 0.5f + dx[4 * d + c]);
    EXPECT_EQ(g_tok[2 * d + c], 0.5f);  // never seen
    for (int64_t p = 0; p < t; ++p)
      EXPECT_EQ(g_pos[p * d + c], (-0.25f + dx[p * d + c]) + dx[(p + t) * d + c]);
  }
  std::vector<float> x{1.0f, 2.0f, 3.0f};
  add_inplace(x.data(), std::vector<float>{0.5f, -2.0f, 1e-8f}.data(), 3);
  EXPECT_EQ(x, (std::vector<float>{1.5f, 0.0f, 3.0f + 1e-8f}));
}

TEST(adam_update, first_step_moves_by_the_learning_rate_and_clipping_scales_the_moments) {
  adam_config cfg;
  cfg.learning_rate = 0.01;
  cfg.grad_clip = 0;
  std::vector<float> p = {1.0f, -2.0f, 0.5f}, g = {3.0f, -0.004f, 40.0f};
  adam a(cfg, p.size());
  auto norm = a.step(p, g);
  ASSERT_TRUE(norm.ok());
  EXPECT_NEAR(*norm, std::sqrt(9.0 + 0.004 * 0.004 + 1600.0), 1e-9);
  EXPECT_NEAR(p[0], 1.0f - 0.01f, 1e-6);
  EXPECT_NEAR(p[1], -2.0f + 0.01f, 1e-5);  // eps matters a little for a tiny gradient
  EXPECT_NEAR(p[2], 0.5f - 0.01f, 1e-6);

  cfg.grad_clip = 1.0;
  adam c(cfg, 2);
  std::vector<float> q = {0.0f, 0.0f}, h = {3.0f, 4.0f};  // norm 5: clipped to 1
  auto n2 = c.step(q, h);
  ASSERT_TRUE(n2.ok());
  EXPECT_DOUBLE_EQ(*n2, 5.0);  // the norm before clipping
  auto state = read_adam_state(c.serialize());
  ASSERT_TRUE(state.ok());
  EXPECT_NEAR(state->m[0], (1 - cfg.beta1) * 3.0 / 5.0, 1e-7);
  EXPECT_NEAR(state->m[1], (1 - cfg.beta1) * 4.0 / 5.0, 1e-7);
  EXPECT_NEAR(state->v[1], (1 - cfg.beta2) * 16.0 / 25.0, 1e-8);
}

}  // namespace
}  // namespace moerl::policy
