// The policy's backward pass (dense parts here, MoE parts through kernels/) against central
// finite differences of its forward, on every parameter tensor; and GRPO's loss gradient
// against finite differences of the loss.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "policy/grpo.h"
#include "policy/model.h"
#include "tests/support/tiny_model.h"

namespace moerl::policy {
namespace {

model_config tiny_config() {
  model_config c = moerl::testing::tiny_model(/*seed=*/3, /*max_seq_len=*/8);
  c.aux_loss_coef = 0.05f;
  return c;
}

// loss = sum(logits * R) + aux_loss, evaluated in double from the fp32 forward.
double loss_of(moe_policy& m, const std::vector<token_id>& tok, int64_t b, int64_t t,
               const std::vector<float>& r, const std::vector<uint8_t>& mask) {
  forward_state st;
  EXPECT_TRUE(m.forward(tok, b, t, &st, mask).ok());
  double l = st.aux_loss;
  for (size_t i = 0; i < r.size(); ++i) l += double(st.logits[i]) * r[i];
  return l;
}

TEST(policy_gradient, backward_matches_finite_differences_on_every_tensor) {
  auto ex = make_local_expert_exchange();
  auto m = moe_policy::create(tiny_config(), *ex);
  ASSERT_TRUE(m.ok()) << m.err().to_string();
  auto& pol = **m;
  const int64_t b = 3, t = 6;
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int> tokd(1, num_vocab - 1);
  std::vector<token_id> tok(b * t);
  for (auto& x : tok) x = tokd(rng);
  std::vector<uint8_t> mask(b * t, 1);
  mask[b * t - 1] = mask[b * t - 2] = 0;  // padding: masked from the experts
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> r(b * t * num_vocab);
  for (auto& x : r) x = nd(rng);
  // Make the output head and norms non-trivial so every path carries gradient.
  for (auto& x : pol.params()) x += 0.05f * nd(rng);

  forward_state st;
  ASSERT_TRUE(pol.forward(tok, b, t, &st, mask).ok());
  std::vector<float> grads;
  auto bs = pol.backward(st, r, &grads);
  ASSERT_TRUE(bs.ok()) << bs.err().to_string();

  const double eps = 2e-3;
  int checked = 0, bad = 0;
  for (const auto& ts : pol.layout().tensors()) {
    std::uniform_int_distribution<size_t> pick(0, ts.size() - 1);
    for (int k = 0; k < 6; ++k) {
      const size_t i = ts.offset + pick(rng);
      const float orig = pol.params()[i];
      pol.params()[i] = orig + float(eps);
      const double lp = loss_of(pol, tok, b, t, r, mask);
      pol.params()[i] = orig - float(eps);
      const double lm = loss_of(pol, tok, b, t, r, mask);
      pol.params()[i] = orig;
      const double fd = (lp - lm) / (2 * eps);
      const double an = grads[i];
      const double tol = 2e-2 + 2e-2 * std::fabs(fd);
      ++checked;
      if (std::fabs(fd - an) > tol) {
        ++bad;
        ADD_FAILURE() << ts.name << "[" << i - ts.offset << "]: finite difference " << fd
                      << " vs backward " << an;
      }
    }
  }
  EXPECT_EQ(bad, 0) << "of " << checked << " coordinates";
}

TEST(policy_gradient, padding_positions_do_not_change_earlier_logits) {
  auto ex = make_local_expert_exchange();
  auto pol = std::move(moe_policy::create(tiny_config(), *ex)).value();
  std::vector<token_id> a = {tok_bos, tok_sort, 5, 6, tok_equals, 7};
  std::vector<token_id> bb = a;
  bb[5] = tok_plus;
  forward_state sa, sb;
  ASSERT_TRUE(pol->forward(a, 1, 6, &sa).ok());
  ASSERT_TRUE(pol->forward(bb, 1, 6, &sb, {1, 1, 1, 1, 1, 0}).ok());
  for (int i = 0; i < 5 * num_vocab; ++i) EXPECT_FLOAT_EQ(sa.logits[i], sb.logits[i]);
}

TEST(grpo_loss, gradient_matches_finite_differences_with_clipping_and_kl) {
  grpo_config cfg;
  cfg.clip_eps = 0.2;
  cfg.kl_coef = 0.1;
  std::mt19937_64 rng(9);
  std::normal_distribution<float> nd(0.0f, 0.3f);
  const int n = 4, len = 5;
  std::vector<std::vector<float>> lp(n, std::vector<float>(len)), bl = lp, rl = lp;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < len; ++j) {
      bl[i][j] = -1.0f + nd(rng);
      lp[i][j] = bl[i][j] + nd(rng);  // ratios from ~0.5 to ~2: both branches, clipped or not
      rl[i][j] = -1.0f + nd(rng);
    }
  std::vector<double> adv = {1.0, -1.0, 0.5, -0.25};
  auto build = [&]() {
    std::vector<grpo_token_inputs> in(n);
    for (int i = 0; i < n; ++i)
      in[i] = {lp[i].data(), bl[i].data(), rl[i].data(), len - i % 2, adv[i]};
    return in;
  };
  std::vector<std::vector<float>> d, dummy;
  auto st = grpo_loss(build(), cfg, &d);
  EXPECT_GT(st.clip_fraction, 0.0);
  EXPECT_GT(st.kl, 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < len - i % 2; ++j) {
      const float o = lp[i][j];
      const float e = 1e-3f;
      lp[i][j] = o + e;
      const double up = grpo_loss(build(), cfg, &dummy).loss;
      lp[i][j] = o - e;
      const double dn = grpo_loss(build(), cfg, &dummy).loss;
      lp[i][j] = o;
      const double fd = (up - dn) / (2 * double(e));
      // Away from the clip boundary the loss is smooth; skip points within 2e of it.
      const double ratio = std::exp(double(lp[i][j]) - bl[i][j]);
      if (std::fabs(ratio - 0.8) < 3e-3 || std::fabs(ratio - 1.2) < 3e-3) continue;
      EXPECT_NEAR(d[i][j], fd, 1e-4) << i << "," << j;
    }
}

TEST(grpo_advantages, are_normalised_within_each_group_and_zero_for_a_flat_group) {
  std::vector<sample> s(6);
  double rewards[6] = {1, 0, 0.5, 0.5, 0.5, 0.5};
  for (int i = 0; i < 6; ++i) {
    s[i].reward = rewards[i];
    s[i].group = i < 2 ? 0 : 1;
  }
  auto a = group_advantages(s);
  EXPECT_NEAR(a[0], 1.0, 1e-5);
  EXPECT_NEAR(a[1], -1.0, 1e-5);
  for (int i = 2; i < 6; ++i) EXPECT_EQ(a[i], 0.0);
}

}  // namespace
}  // namespace moerl::policy
