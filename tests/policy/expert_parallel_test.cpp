// The policy sharded over an expert-parallel group (the in-process reference group, one
// thread per rank) computes what the single-rank policy computes: same initial weights per
// expert, same logits, expert gradients that sum the ranks' batches, same samples.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <thread>

#include "policy/trainer.h"
#include "tests/support/tiny_model.h"

namespace moerl::policy {
namespace {

model_config ep_config() {
  model_config c = moerl::testing::tiny_model(/*seed=*/5, /*max_seq_len=*/12);
  c.aux_loss_coef = 0.0f;  // a per-rank statistic; compared separately below
  return c;
}

std::vector<float> tensor(const moe_policy& p, const std::vector<float>& buf,
                          const std::string& name, int64_t first_row = 0, int64_t rows = -1) {
  const tensor_spec* t = p.layout().find(name);
  const size_t row = t->size() / t->dims[0];
  if (rows < 0) rows = t->dims[0];
  auto b = buf.begin() + t->offset + first_row * row;
  return std::vector<float>(b, b + rows * row);
}

void expect_near(const std::vector<float>& a, const std::vector<float>& b, double tol,
                 const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], tol + tol * std::fabs(b[i])) << what << " [" << i << "]";
}

TEST(expert_parallel, two_rank_group_matches_the_single_rank_policy) {
  const int R = 2;
  auto single_ex = make_local_expert_exchange();
  auto single = std::move(moe_policy::create(ep_config(), *single_ex)).value();
  auto group = make_inprocess_expert_group(R);
  std::vector<std::unique_ptr<moe_policy>> ranks;
  for (int r = 0; r < R; ++r)
    ranks.push_back(std::move(moe_policy::create(ep_config(), *group[r])).value());
  // Shards start as slices of the single-rank weights (seeded per global expert).
  for (int r = 0; r < R; ++r)
    for (const auto& t : ranks[r]->layout().tensors()) {
      const bool expert = t.name.find("moe.w_") != std::string::npos;
      expect_near(tensor(*ranks[r], ranks[r]->params(), t.name),
                  tensor(*single, single->params(), t.name, expert ? r * 2 : 0, expert ? 2 : -1),
                  0.0, t.name);
    }
  // Move away from the near-uniform start so routing and logits are not trivial, and give
  // every rank the same weights again (dense tensors fully, expert tensors their slice).
  std::mt19937_64 rng(8);
  std::normal_distribution<float> nd(0.0f, 0.2f);
  for (auto& x : single->params()) x += nd(rng);
  for (int r = 0; r < R; ++r)
    for (const auto& t : ranks[r]->layout().tensors()) {
      const tensor_spec* s = single->layout().find(t.name);
      const bool expert = t.name.find("moe.w_") != std::string::npos;
      const size_t from = s->offset + (expert ? r * t.size() : 0);
      for (size_t i = 0; i < t.size(); ++i)
        ranks[r]->params()[t.offset + i] = single->params()[from + i];
    }

  // Each rank trains on its own batch.
  const int64_t b = 3, t = 7;
  std::uniform_int_distribution<int> tokd(1, num_vocab - 1);
  std::vector<std::vector<token_id>> tok(R, std::vector<token_id>(b * t));
  std::vector<std::vector<float>> dl(R, std::vector<float>(b * t * num_vocab));
  for (int r = 0; r < R; ++r) {
    for (auto& x : tok[r]) x = tokd(rng);
    for (auto& x : dl[r]) x = nd(rng);
  }
  std::vector<forward_state> st(R);
  std::vector<std::vector<float>> grads(R);
  std::vector<status> fw(R), bw(R);
  std::vector<std::thread> th;
  for (int r = 0; r < R; ++r)
    th.emplace_back([&, r] {
      fw[r] = ranks[r]->forward(tok[r], b, t, &st[r]);
      if (fw[r]) bw[r] = ranks[r]->backward(st[r], dl[r], &grads[r]);
    });
  for (auto& x : th) x.join();
  for (int r = 0; r < R; ++r) {
    ASSERT_TRUE(fw[r].ok()) << fw[r].err().to_string();
    ASSERT_TRUE(bw[r].ok()) << bw[r].err().to_string();
  }

  std::vector<std::vector<float>> single_grads(R);
  for (int r = 0; r < R; ++r) {
    forward_state s;
    ASSERT_TRUE(single->forward(tok[r], b, t, &s).ok());
    expect_near(st[r].logits, s.logits, 1e-5, "logits of rank " + std::to_string(r));
    ASSERT_TRUE(single->backward(s, dl[r], &single_grads[r]).ok());
  }
  for (int r = 0; r < R; ++r)
    for (const auto& ts : ranks[r]->layout().tensors()) {
      const bool expert = ts.name.find("moe.w_") != std::string::npos;
      if (!expert) {  // dense: this rank's tokens only (the trainer all-reduces these)
        expect_near(tensor(*ranks[r], grads[r], ts.name), tensor(*single, single_grads[r], ts.name),
                    1e-4, "dense grad " + ts.name);
      } else {  // experts: every rank's tokens that were routed here
        auto a = tensor(*single, single_grads[0], ts.name, r * 2, 2);
        auto c = tensor(*single, single_grads[1], ts.name, r * 2, 2);
        for (size_t i = 0; i < a.size(); ++i) a[i] += c[i];
        expect_near(tensor(*ranks[r], grads[r], ts.name), a, 1e-4, "expert grad " + ts.name);
      }
    }
}

TEST(expert_parallel, ranks_generate_what_the_single_rank_policy_generates) {
  const int R = 2;
  auto single_ex = make_local_expert_exchange();
  auto single = std::move(moe_policy::create(ep_config(), *single_ex)).value();
  auto group = make_inprocess_expert_group(R);
  std::vector<std::unique_ptr<moe_policy>> ranks;
  for (int r = 0; r < R; ++r)
    ranks.push_back(std::move(moe_policy::create(ep_config(), *group[r])).value());
  auto t = make_sort_task(3);
  std::vector<result<std::vector<sample>>> got(R, std::vector<sample>{});
  std::vector<std::thread> th;
  for (int r = 0; r < R; ++r)
    th.emplace_back([&, r] {
      std::mt19937_64 rng(100 + r);  // different prompts and draws per rank
      got[r] = rollout(*ranks[r], *t, 3, 2, 1.0f, rng, 0, 0);
    });
  for (auto& x : th) x.join();
  for (int r = 0; r < R; ++r) {
    ASSERT_TRUE(got[r].ok()) << got[r].err().to_string();
    std::mt19937_64 rng(100 + r);
    auto want = rollout(*single, *t, 3, 2, 1.0f, rng, 0, 0);
    ASSERT_TRUE(want.ok());
    for (size_t i = 0; i < want->size(); ++i) {
      EXPECT_EQ((*got[r])[i].completion, (*want)[i].completion) << r << "/" << i;
      expect_near((*got[r])[i].behaviour_logprobs, (*want)[i].behaviour_logprobs, 1e-5, "logprobs");
    }
  }
}

}  // namespace
}  // namespace moerl::policy
