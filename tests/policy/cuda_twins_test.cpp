// The policy's CUDA twins (policy/cuda/) against the CPU ops on the same random inputs,
// forward and backward, and Adam over several steps. Runs where a GPU is visible; elsewhere
// every comparison is skipped with a message saying so (the host-side argument checks are
// cuda_host_checks_test.cpp's, which runs everywhere). Tolerances are those stated in
// policy/cuda/dense_ops_cuda.h and adam_cuda.h, with why.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "policy/adam.h"
#include "policy/cuda/adam_cuda.h"
#include "policy/cuda/dense_ops_cuda.h"
#include "policy/dense_ops.h"
#include "tests/kernels/test_util.h"
#include "tests/support/cuda_test_util.h"

namespace moerl::policy {
namespace {

using kernels::testing::random_floats;
using moerl::testing::dev;
using moerl::testing::expect_close;
#define REQUIRE_GPU() MOERL_REQUIRE_GPU("policy CUDA twins")

// cuBLAS vs OpenBLAS, exp vs expf: sums in another order or exponentials a few ulp apart.
constexpr double kReordered = 1e-5;
// Sums in the CPU's order in the CPU's precision, no FMA: designed to be the CPU's bits.
constexpr double kSameOrder = 1e-6;

TEST(policy_cuda_twins, linear_forward_and_backward_match_the_cpu_and_accumulate_dw) {
  REQUIRE_GPU();
  for (auto [n, d_in, d_out] :
       {std::array<int64_t, 3>{37, 64, 192}, {1, 16, 16}, {0, 8, 8}, {5, 1, 3}}) {
    SCOPED_TRACE("n=" + std::to_string(n) + " d_in=" + std::to_string(d_in) +
                 " d_out=" + std::to_string(d_out));
    auto x = random_floats(n * d_in, 1), w = random_floats(d_in * d_out, 2);
    auto dy = random_floats(n * d_out, 3), dw0 = random_floats(d_in * d_out, 4);
    std::vector<float> y(n * d_out), dx(n * d_in), dw = dw0;
    linear_forward(x.data(), w.data(), n, d_in, d_out, y.data());
    linear_backward(x.data(), w.data(), dy.data(), n, d_in, d_out, dx.data(), dw.data());
    dev<float> gx(x), gw(w), gdy(dy), gy(n * d_out), gdx(n * d_in), gdw(dw0), gdw_only(dw0);
    ASSERT_TRUE(cuda::linear_forward(nullptr, gx.get(), gw.get(), n, d_in, d_out, gy.get()).ok());
    ASSERT_TRUE(cuda::linear_backward(nullptr, gx.get(), gw.get(), gdy.get(), n, d_in, d_out,
                                      gdx.get(), gdw.get())
                    .ok());
    // dx null: only dw, which still accumulates.
    ASSERT_TRUE(cuda::linear_backward(nullptr, gx.get(), gw.get(), gdy.get(), n, d_in, d_out,
                                      nullptr, gdw_only.get())
                    .ok());
    expect_close(gy.host(), y, kReordered, "linear y");
    expect_close(gdx.host(), dx, kReordered, "linear dx");
    expect_close(gdw.host(), dw, kReordered, "linear dw");
    expect_close(gdw_only.host(), dw, kReordered, "linear dw (dx null)");
  }
}

TEST(policy_cuda_twins, rmsnorm_forward_and_backward_match_the_cpu_and_accumulate) {
  REQUIRE_GPU();
  for (auto [n, d] : {std::array<int64_t, 2>{300, 64}, {1, 1}, {7, 1000}, {0, 16}}) {
    SCOPED_TRACE("n=" + std::to_string(n) + " d=" + std::to_string(d));
    auto x = random_floats(n * d, 5, -2, 2), g = random_floats(d, 6, 0.5f, 1.5f);
    auto dy = random_floats(n * d, 7), dx0 = random_floats(n * d, 8), dg0 = random_floats(d, 9);
    std::vector<float> y(n * d), inv(n), dx = dx0, dg = dg0;
    rmsnorm_forward(x.data(), g.data(), n, d, y.data(), inv.data());
    rmsnorm_backward(x.data(), g.data(), inv.data(), dy.data(), n, d, dx.data(), dg.data());
    dev<float> gx(x), gg(g), gdy(dy), gy(n * d), ginv(n), gdx(dx0), gdg(dg0);
    ASSERT_TRUE(
        cuda::rmsnorm_forward(nullptr, gx.get(), gg.get(), n, d, gy.get(), ginv.get()).ok());
    ASSERT_TRUE(cuda::rmsnorm_backward(nullptr, gx.get(), gg.get(), ginv.get(), gdy.get(), n, d,
                                       gdx.get(), gdg.get())
                    .ok());
    expect_close(gy.host(), y, kSameOrder, "rmsnorm y");
    expect_close(ginv.host(), inv, kSameOrder, "rmsnorm inv_rms");
    expect_close(gdx.host(), dx, kSameOrder, "rmsnorm dx");
    expect_close(gdg.host(), dg, kSameOrder, "rmsnorm dg");
  }
}

TEST(policy_cuda_twins, causal_attention_forward_and_backward_match_the_cpu_layouts) {
  REQUIRE_GPU();
  struct shape {
    int64_t b, t;
    int heads, d_head;
  };
  for (shape s : {shape{3, 17, 4, 16}, shape{1, 1, 1, 1}, shape{2, 200, 2, 8}, shape{0, 5, 2, 4}}) {
    SCOPED_TRACE("b=" + std::to_string(s.b) + " t=" + std::to_string(s.t));
    const int64_t d = int64_t(s.heads) * s.d_head, rows = s.b * s.t;
    auto qkv = random_floats(rows * 3 * d, 10, -2, 2), dout = random_floats(rows * d, 11);
    std::vector<float> probs(s.b * s.heads * s.t * s.t), out(rows * d), dqkv(rows * 3 * d);
    attention_forward(qkv.data(), s.b, s.t, s.heads, s.d_head, probs.data(), out.data());
    attention_backward(qkv.data(), probs.data(), dout.data(), s.b, s.t, s.heads, s.d_head,
                       dqkv.data());
    // probs and dqkv start as garbage: the twins overwrite every element, as the CPU does.
    dev<float> gqkv(qkv), gdout(dout), gout(rows * d), gcpu_probs(probs);
    dev<float> gprobs(std::vector<float>(probs.size(), 7.0f));
    dev<float> gdqkv(std::vector<float>(dqkv.size(), 7.0f));
    ASSERT_TRUE(cuda::attention_forward(nullptr, gqkv.get(), s.b, s.t, s.heads, s.d_head,
                                        gprobs.get(), gout.get())
                    .ok());
    // Backward from the CPU's probabilities: the comparison isolates backward's arithmetic.
    ASSERT_TRUE(cuda::attention_backward(nullptr, gqkv.get(), gcpu_probs.get(), gdout.get(), s.b,
                                         s.t, s.heads, s.d_head, gdqkv.get())
                    .ok());
    expect_close(gprobs.host(), probs, kReordered, "attention probs");
    expect_close(gout.host(), out, kReordered, "attention out");
    expect_close(gdqkv.host(), dqkv, kSameOrder, "attention dqkv");
  }
}

TEST(policy_cuda_twins, attention_decode_matches_the_cpu_at_every_position) {
  REQUIRE_GPU();
  const int64_t b = 5, max_len = 33;
  const int heads = 4, d_head = 8;
  const int64_t d = heads * d_head;
  auto q = random_floats(b * d, 12, -2, 2), k = random_floats(b * max_len * d, 13, -2, 2);
  auto v = random_floats(b * max_len * d, 14);
  dev<float> gq(q), gk(k), gv(v), gout(b * d);
  for (int64_t pos : {int64_t(0), int64_t(1), int64_t(16), max_len - 1}) {
    SCOPED_TRACE("pos=" + std::to_string(pos));
    std::vector<float> out(b * d);
    attention_decode(q.data(), k.data(), v.data(), b, max_len, pos, heads, d_head, out.data());
    ASSERT_TRUE(cuda::attention_decode(nullptr, gq.get(), gk.get(), gv.get(), b, max_len, pos,
                                       heads, d_head, gout.get())
                    .ok());
    expect_close(gout.host(), out, kReordered, "attention_decode out");
  }
}

TEST(policy_cuda_twins, log_softmax_row_matches_the_cpu_at_several_temperatures) {
  REQUIRE_GPU();
  for (int n : {1, 17, 1000}) {
    for (float temperature : {1.0f, 0.7f, 3.0f}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " T=" + std::to_string(temperature));
      auto logits = random_floats(n, 15, -8, 8);
      std::vector<float> out(n);
      log_softmax_row(logits.data(), n, temperature, out.data());
      dev<float> gl(logits), gout(n);
      ASSERT_TRUE(cuda::log_softmax_row(nullptr, gl.get(), n, temperature, gout.get()).ok());
      expect_close(gout.host(), out, kReordered, "log_softmax_row");
    }
  }
}

// Elementwise sums in the CPU's order (one thread per output element walking the rows): bits.
TEST(policy_cuda_twins, embeddings_and_add_inplace_give_the_cpus_bits) {
  REQUIRE_GPU();
  const int64_t d = 24, t = 7, b = 5, n = b * t;
  auto tok = random_floats(num_vocab * d, 40), pos = random_floats(t * d, 41);
  auto dx = random_floats(n * d, 42), g_tok0 = random_floats(num_vocab * d, 43);
  auto g_pos0 = random_floats(t * d, 44);
  std::vector<token_id> tokens(n);
  for (int64_t i = 0; i < n; ++i) tokens[i] = token_id((i * 7 + i / 3) % num_vocab);
  std::vector<float> x(n * d), g_tok = g_tok0, g_pos = g_pos0, step(b * d);
  embed_forward(tok.data(), pos.data(), tokens.data(), n, t, 0, d, x.data());
  embed_forward(tok.data(), pos.data(), tokens.data(), b, 1, 3, d, step.data());
  embed_backward(tokens.data(), dx.data(), n, t, d, g_tok.data(), g_pos.data());
  dev<float> gtok(tok), gpos(pos), gdx(dx), gx(n * d), gstep(b * d), ggt(g_tok0), ggp(g_pos0);
  dev<token_id> gtokens(tokens);
  ASSERT_TRUE(
      cuda::embed_forward(nullptr, gtok.get(), gpos.get(), gtokens.get(), n, t, 0, d, gx.get())
          .ok());
  ASSERT_TRUE(
      cuda::embed_forward(nullptr, gtok.get(), gpos.get(), gtokens.get(), b, 1, 3, d, gstep.get())
          .ok());
  ASSERT_TRUE(
      cuda::embed_backward(nullptr, gtokens.get(), gdx.get(), n, t, d, ggt.get(), ggp.get()).ok());
  EXPECT_EQ(gx.host(), x);
  EXPECT_EQ(gstep.host(), step);
  EXPECT_EQ(ggt.host(), g_tok);
  EXPECT_EQ(ggp.host(), g_pos);
  std::vector<float> sum = x;
  add_inplace(sum.data(), dx.data(), n * d);
  ASSERT_TRUE(cuda::add_inplace(nullptr, gx.get(), gdx.get(), n * d).ok());
  EXPECT_EQ(gx.host(), sum);
}

// Adam's moments and parameters after several steps, clipped and not, and its checkpoint.
TEST(policy_cuda_twins, adam_steps_match_the_cpu_with_and_without_clipping) {
  REQUIRE_GPU();
  for (double clip : {0.0, 1.0, 1e6}) {
    SCOPED_TRACE("grad_clip=" + std::to_string(clip));
    adam_config cfg;
    cfg.grad_clip = clip;
    cfg.learning_rate = 3e-3;
    const size_t n = 5000;
    auto params = random_floats(n, 16);
    adam cpu(cfg, n);
    auto gpu = cuda::adam::create(cfg, n);
    ASSERT_TRUE(gpu.ok()) << gpu.err().to_string();
    dev<float> gparams(params);
    for (int step = 0; step < 4; ++step) {
      // A gradient of norm ~40: clip 1.0 clips every step, 1e6 none.
      auto grads = random_floats(n, 100 + step, -1, 1);
      auto cpu_norm = cpu.step(params, grads);
      ASSERT_TRUE(cpu_norm.ok());
      dev<float> ggrads(grads);
      auto gpu_norm = (*gpu)->step(nullptr, gparams.get(), ggrads.get());
      ASSERT_TRUE(gpu_norm.ok()) << gpu_norm.err().to_string();
      EXPECT_NEAR(*gpu_norm, *cpu_norm, 1e-12 * *cpu_norm);
    }
    EXPECT_EQ((*gpu)->num_steps(), cpu.num_steps());
    // One float ulp of the rounded step at most (a clipping factor a double ulp apart).
    expect_close(gparams.host(), params, kSameOrder, "adam params");
    auto bytes = (*gpu)->serialize(nullptr);
    ASSERT_TRUE(bytes.ok());
    auto g_state = read_adam_state(*bytes), c_state = read_adam_state(cpu.serialize());
    ASSERT_TRUE(g_state.ok() && c_state.ok());
    EXPECT_EQ(g_state->steps, c_state->steps);
    expect_close(g_state->m, c_state->m, kSameOrder, "adam m");
    expect_close(g_state->v, c_state->v, kSameOrder, "adam v");
  }
}

TEST(policy_cuda_twins, adam_skips_a_non_finite_step_and_loads_like_the_cpu) {
  REQUIRE_GPU();
  const size_t n = 300;
  auto gpu = cuda::adam::create(adam_config{}, n);
  ASSERT_TRUE(gpu.ok()) << gpu.err().to_string();
  auto params = random_floats(n, 17), grads = random_floats(n, 18);
  grads[123] = std::numeric_limits<float>::infinity();
  dev<float> gparams(params), ggrads(grads);
  auto st = (*gpu)->step(nullptr, gparams.get(), ggrads.get());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.err().code, errc::invalid_argument);
  EXPECT_NE(st.err().message.find("not finite"), std::string::npos) << st.err().message;
  EXPECT_EQ((*gpu)->num_steps(), 0);
  EXPECT_EQ(gparams.host(), params);
  // A CPU checkpoint loads into the twin and comes back byte for byte.
  adam cpu(adam_config{}, n);
  grads[123] = 0.5f;
  ASSERT_TRUE(cpu.step(params, grads).ok());
  const std::string saved = cpu.serialize();
  ASSERT_TRUE((*gpu)->load(nullptr, saved).ok());
  EXPECT_EQ((*gpu)->num_steps(), 1);
  auto again = (*gpu)->serialize(nullptr);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(*again == saved);
  // Moments of another model: the CPU's refusal, word for word; the state stays.
  adam other(adam_config{}, n + 1);
  auto refused = (*gpu)->load(nullptr, other.serialize());
  auto cpu_refused = cpu.load(other.serialize());
  ASSERT_FALSE(refused.ok());
  ASSERT_FALSE(cpu_refused.ok());
  EXPECT_EQ(refused.err().code, cpu_refused.err().code);
  EXPECT_EQ(refused.err().message, cpu_refused.err().message);
  EXPECT_EQ((*gpu)->num_steps(), 1);
}

}  // namespace
}  // namespace moerl::policy
