// The policy as the runtime uses it: generation's KV-cache path agrees with the training
// forward, runs are reproducible from seeds, parameters round-trip through bytes with a
// stable content hash, bad input is an error.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "policy/params.h"
#include "policy/task.h"
#include "policy/trainer.h"

namespace moerl::policy {
namespace {

model_config small_config() {
  model_config c;
  c.max_seq_len = 16;
  c.d_model = 32;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_experts = 4;
  c.top_k = 2;
  c.ffn_dim = 16;
  c.seed = 7;
  return c;
}

std::unique_ptr<moe_policy> make(expert_exchange& ex, model_config c = small_config()) {
  auto m = moe_policy::create(c, ex);
  EXPECT_TRUE(m.ok());
  auto p = std::move(m).value();
  // Sharper than the near-uniform start, so sampling and logprobs are not trivially flat.
  std::mt19937_64 rng(1);
  std::normal_distribution<float> nd(0.0f, 0.3f);
  for (auto& x : p->params()) x += nd(rng);
  return p;
}

TEST(policy_generation, behaviour_logprobs_equal_the_training_forward_logprobs) {
  auto ex = make_local_expert_exchange();
  auto pol = make(*ex);
  auto t = make_sort_task(4);
  std::mt19937_64 rng(3);
  auto samples = rollout(*pol, *t, 6, 4, 0.7f, rng, 0, 0);
  ASSERT_TRUE(samples.ok()) << samples.err().to_string();
  bool some_short = false;
  for (const auto& s : *samples) some_short |= s.completion.size() < 5;
  EXPECT_TRUE(some_short) << "want rows that stopped early at EOS in the batch";
  auto lp = completion_logprobs(*pol, *samples, 0.7f);
  ASSERT_TRUE(lp.ok());
  for (size_t i = 0; i < samples->size(); ++i) {
    const auto& s = (*samples)[i];
    ASSERT_EQ((*lp)[i].size(), s.completion.size());
    for (size_t j = 0; j < s.completion.size(); ++j)
      EXPECT_NEAR((*lp)[i][j], s.behaviour_logprobs[j], 2e-4) << i << "," << j;
  }
}

TEST(policy_generation, same_seeds_give_the_same_samples_and_weights_hash) {
  auto t = make_add_task(2);
  std::vector<std::vector<token_id>> out[2];
  std::string hash[2];
  for (int run = 0; run < 2; ++run) {
    auto ex = make_local_expert_exchange();
    auto pol = make(*ex);
    std::mt19937_64 rng(42);
    auto s = rollout(*pol, *t, 4, 4, 1.0f, rng, 0, 0);
    ASSERT_TRUE(s.ok());
    for (auto& x : *s) out[run].push_back(x.completion);
    hash[run] = pol->content_hash();
  }
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(hash[0], hash[1]);
}

TEST(policy_generation, low_temperature_sampling_is_the_argmax) {
  auto ex = make_local_expert_exchange();
  auto pol = make(*ex);
  std::vector<std::vector<token_id>> prompts(3, *encode("^s4821="));
  std::mt19937_64 rng(1);
  auto g = pol->generate(prompts, 5, 1e-4f, rng);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->completions[0], g->completions[1]);
  EXPECT_EQ(g->completions[0], g->completions[2]);
  for (float lp : g->logprobs[0]) EXPECT_NEAR(lp, 0.0f, 1e-3);
}

TEST(policy_params, serialise_load_round_trip_and_hash_tracks_content) {
  auto ex = make_local_expert_exchange();
  auto a = make(*ex);
  model_config other = small_config();
  other.seed = 99;
  auto b = moe_policy::create(other, *ex).value();
  EXPECT_NE(a->content_hash(), b->content_hash());
  ASSERT_TRUE(b->load(a->serialize()).ok());
  EXPECT_EQ(a->content_hash(), b->content_hash());
  EXPECT_EQ(a->params(), b->params());
  EXPECT_EQ(a->content_hash().size(), 16u);
}

TEST(policy_params, content_hash_is_xxh3_64_in_hex_and_sees_the_last_byte) {
  // XXH3-64 (seed 0) of the empty input is the algorithm's published 0x2D06800538D394C2; an
  // accidental switch of the hash (or its seed) shows here before it shows in a run.
  EXPECT_EQ(content_hash(""), "2d06800538d394c2");
  EXPECT_EQ(content_hash("moerl"), "79a0ea3057740db8");
  std::string big(1 << 20, '\x5a');
  const std::string h = content_hash(big);
  big.back() = '\x5b';
  EXPECT_NE(content_hash(big), h);
}

TEST(policy_params, truncated_or_foreign_bytes_are_refused_with_a_named_reason) {
  auto ex = make_local_expert_exchange();
  auto a = make(*ex);
  const std::string bytes = a->serialize();
  auto r1 = a->load(bytes.substr(0, bytes.size() - 3));
  ASSERT_FALSE(r1.ok());
  EXPECT_EQ(r1.err().code, errc::malformed_message);
  EXPECT_FALSE(a->load("not parameters").ok());
  model_config wider = small_config();
  wider.d_model = 64;
  auto w = moe_policy::create(wider, *ex).value();
  auto r2 = a->load(w->serialize());
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.err().code, errc::invalid_argument);
  EXPECT_NE(r2.err().message.find("tok_emb"), std::string::npos) << r2.err().message;
}

TEST(policy_generation, bad_prompts_and_budgets_are_errors) {
  auto ex = make_local_expert_exchange();
  auto pol = make(*ex);
  std::mt19937_64 rng(1);
  EXPECT_FALSE(pol->generate({{1, 2}, {1}}, 3, 1.0f, rng).ok());  // ragged
  EXPECT_FALSE(pol->generate({{1, 99}}, 3, 1.0f, rng).ok());      // unknown id
  EXPECT_FALSE(pol->generate({{1, 2}}, 15, 1.0f, rng).ok());      // past max_seq_len
  EXPECT_FALSE(pol->generate({{1, 2}}, 3, 0.0f, rng).ok());       // temperature
  forward_state st;
  EXPECT_FALSE(pol->forward({1, 2, 3}, 2, 2, &st).ok());
}

TEST(policy_config, invalid_shapes_name_the_key) {
  model_config c = small_config();
  c.num_heads = 5;
  auto ex = make_local_expert_exchange();
  auto r = moe_policy::create(c, *ex);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.err().message.find("policy.num_heads"), std::string::npos);
  c = small_config();
  c.top_k = 5;
  EXPECT_NE(moe_policy::create(c, *ex).err().message.find("policy.top_k"), std::string::npos);
}

}  // namespace
}  // namespace moerl::policy

namespace moerl::policy {
namespace {

TEST(adam_state, checkpointed_optimiser_resumes_with_identical_steps) {
  adam_config ac;
  std::vector<float> p(50), g(50);
  std::mt19937_64 rng(2);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& x : p) x = nd(rng);
  adam a(ac, p.size());
  for (int s = 0; s < 3; ++s) {
    for (auto& x : g) x = nd(rng);
    ASSERT_TRUE(a.step(p, g).ok());
  }
  adam b(ac, p.size());
  ASSERT_TRUE(b.load(a.serialize()).ok());
  EXPECT_EQ(b.num_steps(), 3);
  std::vector<float> pa = p, pb = p;
  for (auto& x : g) x = nd(rng);
  ASSERT_TRUE(a.step(pa, g).ok());
  ASSERT_TRUE(b.step(pb, g).ok());
  EXPECT_EQ(pa, pb);
  adam c(ac, 49);
  EXPECT_EQ(c.load(a.serialize()).err().code, errc::invalid_argument);
  EXPECT_EQ(b.load(a.serialize().substr(0, 40)).err().code, errc::malformed_message);
}

TEST(adam_state, non_finite_gradient_skips_the_step_and_keeps_parameters) {
  adam a(adam_config{}, 2);
  std::vector<float> p = {1.0f, 2.0f};
  auto r = a.step(p, {NAN, 0.0f});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(p, (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(a.num_steps(), 0);
}

}  // namespace
}  // namespace moerl::policy
