// The device policy (policy/cuda/model_cuda.h) against the CPU policy (policy/model.h) from the
// same config and seed: initial bytes, forward logits and aux loss with padding, gradients after
// backward, parameters after one Adam step, a generation from the same rng seed, and the
// argument refusals. Runs where a GPU is visible; elsewhere skipped with a message saying so
// (its host-side refusals are cuda_host_checks_test.cpp's, which runs everywhere). NOT YET RUN
// ON A GPU when written (no device on the build machine): bench/gpu_check.sh runs it.
// The expert-parallel rank (two ranks over an in-process group, the device policies' exchange
// host-staged: device_expert_exchange.h) is held to the CPU policy's rank the same way.
//
// Tolerances (expect_close: |gpu - cpu| <= rtol * (|cpu| + max|cpu|)), and why:
//   - initial and loaded parameters: exact (copies, and the CPU policy made them).
//   - logits, aux loss: 1e-4. Each GEMM and exp agrees to 1e-5 (dense_ops_cuda.h); about ten
//     of them compound through two layers. Routing is discrete: the test's seed was chosen with
//     no near-tie in top-k, so both pick the same experts.
//   - gradients: 2e-4, the forward's error carried through backward's GEMMs once more.
//   - parameters after one Adam step: 1e-3 of the largest parameter. Step one moves each
//     parameter by about lr * sign(g): a gradient within rounding of zero may flip sign,
//     2 * lr = 2e-3 against parameters of magnitude ~3.
//   - generation: the same tokens (a draw differs only if the uniform number falls within the
//     logits' ~1e-5 disagreement of a bucket edge), log-probabilities within 1e-4.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "policy/adam.h"
#include "policy/cuda/adam_cuda.h"
#include "policy/cuda/model_cuda.h"
#include "policy/model.h"
#include "tests/kernels/test_util.h"
#include "tests/support/cuda_test_util.h"

namespace moerl::policy {
namespace {

using kernels::testing::random_floats;
using moerl::testing::expect_close;
#define REQUIRE_GPU() MOERL_REQUIRE_GPU("device policy vs CPU policy")

model_config small_config() {
  model_config c;
  c.max_seq_len = 16;
  c.d_model = 32;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_experts = 4;
  c.top_k = 2;
  c.ffn_dim = 48;
  c.aux_loss_coef = 0.01f;
  c.seed = 7;
  return c;
}

struct both {
  std::unique_ptr<expert_exchange> ex = make_local_expert_exchange();
  std::unique_ptr<moe_policy> cpu;
  std::unique_ptr<cuda::moe_policy> gpu;
  both() {
    auto c = moe_policy::create(small_config(), *ex);
    EXPECT_TRUE(c.ok()) << c.err().to_string();
    cpu = std::move(*c);
    auto g = cuda::moe_policy::create(small_config());
    EXPECT_TRUE(g.ok()) << g.err().to_string();
    if (g.ok()) gpu = std::move(*g);
  }
};

// b = 3 sequences of t = 10, the last with 3 padding positions.
struct batch {
  int64_t b = 3, t = 10;
  std::vector<token_id> tokens;
  std::vector<uint8_t> mask;
  batch() {
    std::mt19937 gen(11);
    for (int64_t i = 0; i < b * t; ++i) tokens.push_back(token_id(gen() % num_vocab));
    mask.assign(b * t, 1);
    for (int64_t j = 7; j < t; ++j) mask[2 * t + j] = 0;
  }
};

TEST(policy_model_cuda, starts_from_the_cpu_policys_bytes_and_loads_them_back_exactly) {
  REQUIRE_GPU();
  both p;
  ASSERT_TRUE(p.gpu);
  auto bytes = p.gpu->serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.err().to_string();
  EXPECT_TRUE(*bytes == p.cpu->serialize());
  auto hash = p.gpu->content_hash();
  ASSERT_TRUE(hash.ok());
  EXPECT_EQ(*hash, p.cpu->content_hash());
  // Another policy's bytes load and come back unchanged.
  p.cpu->params()[5] += 1.0f;
  ASSERT_TRUE(p.gpu->load(p.cpu->serialize()).ok());
  auto again = p.gpu->serialize();
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(*again == p.cpu->serialize());
}

TEST(policy_model_cuda, forward_backward_and_one_adam_step_match_the_cpu_policy) {
  REQUIRE_GPU();
  both p;
  ASSERT_TRUE(p.gpu);
  batch in;
  forward_state cst;
  cuda::forward_state gst;
  ASSERT_TRUE(p.cpu->forward(in.tokens, in.b, in.t, &cst, in.mask).ok());
  auto fw = p.gpu->forward(in.tokens, in.b, in.t, &gst, in.mask);
  ASSERT_TRUE(fw.ok()) << fw.err().to_string();
  expect_close(gst.logits, cst.logits, 1e-4, "logits");
  EXPECT_NEAR(gst.aux_loss, cst.aux_loss, 1e-4 * std::abs(cst.aux_loss));
  for (int l = 0; l < 2; ++l)
    EXPECT_EQ(gst.layers[l].moe.tokens_per_expert, cst.layers[l].moe.tokens_per_expert) << l;

  const auto dlogits = random_floats(cst.logits.size(), 21);
  std::vector<float> cgrads;
  cuda::device_buffer<float> ggrads;
  ASSERT_TRUE(p.cpu->backward(cst, dlogits, &cgrads).ok());
  auto bw = p.gpu->backward(gst, dlogits, &ggrads);
  ASSERT_TRUE(bw.ok()) << bw.err().to_string();
  std::vector<float> g_host;
  ASSERT_TRUE(ggrads.download(&g_host, p.gpu->stream()).ok());
  expect_close(g_host, cgrads, 2e-4, "gradients");

  adam_config ac;
  ac.learning_rate = 1e-3;
  adam cpu_opt(ac, p.cpu->layout().num_floats());
  auto gpu_opt = cuda::adam::create(ac, p.gpu->num_params());
  ASSERT_TRUE(gpu_opt.ok());
  auto cn = cpu_opt.step(p.cpu->params(), cgrads);
  auto gn = (*gpu_opt)->step(p.gpu->stream(), p.gpu->params_device(), ggrads.get());
  ASSERT_TRUE(cn.ok() && gn.ok());
  EXPECT_NEAR(*gn, *cn, 2e-4 * *cn);
  auto params = p.gpu->params_host();
  ASSERT_TRUE(params.ok());
  expect_close(*params, p.cpu->params(), 1e-3, "params after one Adam step");
}

TEST(policy_model_cuda, generation_from_the_same_seed_draws_the_same_tokens) {
  REQUIRE_GPU();
  both p;
  ASSERT_TRUE(p.gpu);
  std::vector<std::vector<token_id>> prompts;
  for (int r = 0; r < 6; ++r)
    prompts.push_back({tok_bos, token_id(tok_digit0 + r), token_id(tok_digit0 + 2 * r % 10),
                       tok_sort, tok_equals});
  std::mt19937_64 rng_cpu(5), rng_gpu(5);
  auto c = p.cpu->generate(prompts, 8, 1.0f, rng_cpu);
  auto g = p.gpu->generate(prompts, 8, 1.0f, rng_gpu);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(g.ok()) << g.err().to_string();
  EXPECT_EQ(g->completions, c->completions);
  ASSERT_EQ(g->logprobs.size(), c->logprobs.size());
  for (size_t r = 0; r < c->logprobs.size(); ++r) {
    ASSERT_EQ(g->logprobs[r].size(), c->logprobs[r].size()) << r;
    for (size_t j = 0; j < c->logprobs[r].size(); ++j)
      EXPECT_NEAR(g->logprobs[r][j], c->logprobs[r][j], 1e-4) << r << "," << j;
  }
  EXPECT_EQ(rng_gpu(), rng_cpu());  // the same number of draws
}

TEST(policy_model_cuda, bad_arguments_are_refused_with_the_cpu_policys_messages) {
  REQUIRE_GPU();
  both p;
  ASSERT_TRUE(p.gpu);
  auto same = [](const status& g, const status& c) {
    ASSERT_FALSE(g.ok());
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(g.err().code, c.err().code);
    EXPECT_EQ(g.err().message, c.err().message);
  };
  forward_state cst;
  cuda::forward_state gst;
  const std::vector<token_id> five(5, tok_bos);
  same(p.gpu->forward(five, 2, 3, &gst), p.cpu->forward(five, 2, 3, &cst));
  const std::vector<token_id> long_seq(20, tok_bos);
  same(p.gpu->forward(long_seq, 1, 20, &gst), p.cpu->forward(long_seq, 1, 20, &cst));
  const std::vector<token_id> bad_tok{tok_bos, 99};
  same(p.gpu->forward(bad_tok, 1, 2, &gst), p.cpu->forward(bad_tok, 1, 2, &cst));
  same(p.gpu->forward(five, 1, 5, &gst, {1, 1}), p.cpu->forward(five, 1, 5, &cst, {1, 1}));
  ASSERT_TRUE(p.gpu->forward(five, 1, 5, &gst).ok());
  ASSERT_TRUE(p.cpu->forward(five, 1, 5, &cst).ok());
  cuda::device_buffer<float> gg;
  std::vector<float> cg;
  same(p.gpu->backward(gst, {1.0f}, &gg), p.cpu->backward(cst, {1.0f}, &cg));
  std::mt19937_64 rng(1);
  auto gen_same = [&](const std::vector<std::vector<token_id>>& prompts, int max_new, float temp) {
    auto g = p.gpu->generate(prompts, max_new, temp, rng);
    auto c = p.cpu->generate(prompts, max_new, temp, rng);
    same(g.ok() ? ok_status() : status(g.err()), c.ok() ? ok_status() : status(c.err()));
  };
  gen_same({{tok_bos, tok_equals}, {tok_bos}}, 4, 1.0f);
  gen_same({{tok_bos, tok_equals}}, 15, 1.0f);
  gen_same({{tok_bos, tok_equals}}, 4, 0.0f);
}

// Runs fn(rank) on one thread per rank (the exchanges are collective) and joins them.
template <class Fn>
void on_ranks(int n, Fn fn) {
  std::vector<std::thread> t;
  for (int r = 0; r < n; ++r) t.emplace_back([&fn, r] { fn(r); });
  for (auto& th : t) th.join();
}

// Two expert-parallel ranks: each device rank (its experts only, the others' through the
// host-staged exchange) against the CPU rank over the same kind of group: the same layout and
// initial bytes, forward logits, gradients after backward, and a generation from one seed.
TEST(policy_model_cuda, an_expert_parallel_rank_matches_the_cpu_policys_rank) {
  REQUIRE_GPU();
  constexpr int kRanks = 2;
  auto cpu_group = make_inprocess_expert_group(kRanks);
  auto gpu_group = make_inprocess_expert_group(kRanks);
  std::vector<std::unique_ptr<moe_policy>> cpu(kRanks);
  std::vector<std::unique_ptr<cuda::moe_policy>> gpu(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    auto c = moe_policy::create(small_config(), *cpu_group[r]);
    ASSERT_TRUE(c.ok()) << c.err().to_string();
    cpu[r] = std::move(*c);
    auto g = cuda::moe_policy::create(small_config(), *gpu_group[r],
                                      cuda::make_host_staged_exchange(*gpu_group[r]));
    ASSERT_TRUE(g.ok()) << g.err().to_string();
    gpu[r] = std::move(*g);
    EXPECT_EQ(gpu[r]->num_expert_ranks(), kRanks);
    ASSERT_TRUE(gpu[r]->layout() == cpu[r]->layout()) << r;
    auto bytes = gpu[r]->serialize();
    ASSERT_TRUE(bytes.ok());
    EXPECT_TRUE(*bytes == cpu[r]->serialize()) << r;
  }
  batch in;
  const auto dlogits = random_floats(size_t(in.b * in.t * num_vocab), 21);
  std::vector<std::string> failures(kRanks);
  std::vector<std::vector<float>> cpu_logits(kRanks), gpu_logits(kRanks), cpu_grads(kRanks),
      gpu_grads(kRanks);
  // The CPU group first, then the device group: each is a collective of its own.
  on_ranks(kRanks, [&](int r) {
    forward_state st;
    auto f = cpu[r]->forward(in.tokens, in.b, in.t, &st, in.mask);
    if (f.ok()) f = cpu[r]->backward(st, dlogits, &cpu_grads[r]);
    if (!f.ok()) failures[r] = "cpu: " + f.err().to_string();
    cpu_logits[r] = st.logits;
  });
  on_ranks(kRanks, [&](int r) {
    cuda::forward_state st;
    cuda::device_buffer<float> g;
    auto f = gpu[r]->forward(in.tokens, in.b, in.t, &st, in.mask);
    if (f.ok()) f = gpu[r]->backward(st, dlogits, &g);
    if (f.ok()) f = g.download(&gpu_grads[r], gpu[r]->stream());
    if (!f.ok()) failures[r] += " gpu: " + f.err().to_string();
    gpu_logits[r] = st.logits;
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(failures[r].empty()) << "rank " << r << ": " << failures[r];
    expect_close(gpu_logits[r], cpu_logits[r], 1e-4, "logits of an expert-parallel rank");
    expect_close(gpu_grads[r], cpu_grads[r], 2e-4, "gradients of an expert-parallel rank");
  }

  // Generation: rank r's rows with rank r's seed, each group stepping together.
  std::vector<std::vector<token_id>> prompts;
  for (int r = 0; r < 3; ++r)
    prompts.push_back({tok_bos, token_id(tok_digit0 + r), tok_sort, tok_equals});
  std::vector<generation> cg(kRanks), gg(kRanks);
  on_ranks(kRanks, [&](int r) {
    std::mt19937_64 rng(40 + r);
    auto g = cpu[r]->generate(prompts, 6, 1.0f, rng);
    if (g.ok()) cg[r] = std::move(*g);
  });
  on_ranks(kRanks, [&](int r) {
    std::mt19937_64 rng(40 + r);
    auto g = gpu[r]->generate(prompts, 6, 1.0f, rng);
    if (g.ok()) gg[r] = std::move(*g);
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_FALSE(cg[r].completions.empty()) << r;
    EXPECT_EQ(gg[r].completions, cg[r].completions) << r;
  }
}

}  // namespace
}  // namespace moerl::policy
