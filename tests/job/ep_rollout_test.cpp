// The expert-parallel rollout: a group of rank threads over fabric (shm), each holding only
// its experts, generates a prompt group whose rows and logprobs equal what a single-rank
// policy with the same full weights generates for the same rows with the same rng. The
// weight slicing round-trips, and agrees with how a sharded policy initialises itself. Bad
// shapes and bad bytes are errors naming the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <thread>

#include "common/config.h"
#include "fabric/collectives.h"
#include "job/ep_policy_group.h"
#include "job/param_slicing.h"
#include "policy/model.h"
#include "tests/job/ep_fixture.h"

namespace moerl::job {
namespace {

using policy::token_id;

policy::model_config small_model() { return testing::small_model(11); }
using testing::node_config;

// Full weights moved off the near-uniform start, so sampling is not close to uniform and
// the experts matter.
std::unique_ptr<policy::moe_policy> trained_looking_policy(policy::expert_exchange& ex) {
  auto p = policy::moe_policy::create(small_model(), ex);
  EXPECT_TRUE(p.ok());
  testing::perturb(**p, 3);
  return std::move(*p);
}

TEST(param_slicing, slices_assemble_back_to_the_full_set_and_match_a_sharded_init) {
  auto local = policy::make_local_expert_exchange();
  auto full = policy::moe_policy::create(small_model(), *local);
  ASSERT_TRUE(full.ok());
  for (int n : {2, 4}) {
    // A sharded group's ranks initialise their shares themselves (model.h's promise).
    auto group = policy::make_inprocess_expert_group(n);
    std::vector<std::unique_ptr<policy::moe_policy>> ranks;
    for (int r = 0; r < n; ++r) {
      auto p = policy::moe_policy::create(small_model(), *group[r]);
      ASSERT_TRUE(p.ok());
      ranks.push_back(std::move(*p));
    }
    std::vector<std::vector<float>> shares;
    for (int r = 0; r < n; ++r) {
      auto s = slice_params((*full)->layout(), (*full)->params(), ranks[r]->layout(), r, n);
      ASSERT_TRUE(s.ok()) << s.err().to_string();
      EXPECT_EQ(*s, ranks[r]->params()) << n << " ranks, rank " << r;
      EXPECT_LT(s->size(), (*full)->params().size());
      shares.push_back(std::move(*s));
    }
    auto back = assemble_params((*full)->layout(), ranks[0]->layout(), shares);
    ASSERT_TRUE(back.ok()) << back.err().to_string();
    EXPECT_EQ(*back, (*full)->params());
  }
}

TEST(param_slicing, expert_ranges_are_the_gaps_between_dense_ranges_and_all_that_ranks_differ_in) {
  using ranges = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ(expert_ranges({{0, 4}, {10, 2}}, 20), (ranges{{4, 6}, {12, 8}}));
  EXPECT_EQ(expert_ranges({{3, 4}}, 7), (ranges{{0, 3}}));
  EXPECT_EQ(expert_ranges({}, 5), (ranges{{0, 5}}));
  EXPECT_EQ(expert_ranges({{0, 5}}, 5), ranges{});
  // On a real policy's shares: outside the expert ranges every rank holds the same floats
  // (what the trainer's share exchange relies on to send the expert ranges alone), and
  // together the two kinds of range cover the buffer once.
  auto local = policy::make_local_expert_exchange();
  auto full = policy::moe_policy::create(small_model(), *local);
  ASSERT_TRUE(full.ok());
  testing::perturb(**full, 5);
  auto group = policy::make_inprocess_expert_group(2);
  auto rank0 = policy::moe_policy::create(small_model(), *group[0]);
  ASSERT_TRUE(rank0.ok());
  const auto& layout = (*rank0)->layout();
  auto dense = dense_ranges((*full)->layout(), layout, 2);
  ASSERT_TRUE(dense.ok()) << dense.err().to_string();
  const auto experts = expert_ranges(*dense, layout.num_floats());
  ASSERT_FALSE(experts.empty());
  std::vector<int> covered(layout.num_floats(), 0);
  for (const ranges* rs : {static_cast<const ranges*>(&*dense), &experts})
    for (const auto& [off, len] : *rs)
      for (size_t i = off; i < off + len; ++i) covered[i]++;
  EXPECT_EQ(std::count(covered.begin(), covered.end(), 1), int64_t(covered.size()));
  auto s0 = slice_params((*full)->layout(), (*full)->params(), layout, 0, 2);
  auto s1 = slice_params((*full)->layout(), (*full)->params(), layout, 1, 2);
  ASSERT_TRUE(s0.ok() && s1.ok());
  std::vector<bool> in_expert(layout.num_floats(), false);
  for (const auto& [off, len] : experts)
    for (size_t i = off; i < off + len; ++i) in_expert[i] = true;
  size_t differing = 0;
  for (size_t i = 0; i < in_expert.size(); ++i) {
    if (!in_expert[i]) {
      EXPECT_EQ((*s0)[i], (*s1)[i]) << "dense float " << i;
    }
    differing += in_expert[i] && (*s0)[i] != (*s1)[i];
  }
  EXPECT_GT(differing, 0u);  // the expert ranges are where the ranks' shares differ
}

TEST(param_slicing, a_layout_that_is_no_split_of_the_full_one_is_refused_by_name) {
  policy::param_layout full, odd;
  full.add("dense", {4});
  full.add("experts", {4, 3});
  odd.add("dense", {4});
  odd.add("experts", {3, 3});
  std::vector<float> data(full.num_floats(), 1.0f);
  auto s = slice_params(full, data, odd, 0, 2);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.err().message.find("experts"), std::string::npos) << s.err().message;
  auto short_data = slice_params(full, std::vector<float>(3), odd, 0, 2);
  ASSERT_FALSE(short_data.ok());
  EXPECT_EQ(short_data.err().code, errc::invalid_argument);
  policy::param_layout missing;
  missing.add("other", {4});
  auto m = slice_params(full, data, missing, 0, 1);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.err().message.find("other"), std::string::npos);
}

TEST(rows_of_rank, splits_contiguously_and_covers_every_row_once) {
  for (int n : {1, 2, 3, 4})
    for (int rows : {4, 5, 6, 7, 8}) {
      int64_t next = 0;
      for (int r = 0; r < n; ++r) {
        auto rr = rows_of_rank(rows, r, n);
        EXPECT_EQ(rr.first, next);
        EXPECT_GE(rr.count, rows / n);
        EXPECT_LE(rr.count, rows / n + 1);
        next += rr.count;
      }
      EXPECT_EQ(next, rows);
    }
}

// The single-rank reference of an EP generation: rank r's rows generated alone, with rank
// r's rng stream, by a policy that owns every expert.
policy::generation single_rank_reference(policy::moe_policy& pol,
                                         const std::vector<token_id>& prompt, int num_rows,
                                         int num_ranks, int max_new, float temperature,
                                         uint64_t base) {
  policy::generation out;
  for (int r = 0; r < num_ranks; ++r) {
    auto rr = rows_of_rank(num_rows, r, num_ranks);
    std::vector<std::vector<token_id>> rows(static_cast<size_t>(rr.count), prompt);
    std::mt19937_64 rng(rank_sampling_seed(base, r));
    auto g = pol.generate(rows, max_new, temperature, rng);
    EXPECT_TRUE(g.ok()) << g.err().to_string();
    for (auto& c : g->completions) out.completions.push_back(c);
    for (auto& l : g->logprobs) out.logprobs.push_back(l);
  }
  return out;
}

class ep_rollout : public ::testing::TestWithParam<int> {};

TEST_P(ep_rollout, rows_and_logprobs_equal_the_single_rank_policy_with_the_same_weights) {
  const int num_ranks = GetParam();
  const int num_rows = 7;  // uneven over the ranks
  const int max_new = 8;
  const float temperature = 1.0f;
  const std::vector<token_id> prompt{3, 5, 7, 4, 2};
  auto local = policy::make_local_expert_exchange();
  auto full = trained_looking_policy(*local);
  const std::string bytes = full->serialize();

  ep_group_shape shape;
  shape.num_ranks = num_ranks;
  shape.max_decode_rows = rows_of_rank(num_rows, 0, num_ranks).count;
  auto group = ep_policy_group::create(node_config(), small_model(), shape);
  ASSERT_TRUE(group.ok()) << group.err().to_string();
  ASSERT_TRUE((*group)->load(bytes).ok());

  size_t tokens = 0;
  for (uint64_t base : {17ull, 18ull, 19ull}) {
    auto got = (*group)->generate(prompt, num_rows, max_new, temperature, base);
    ASSERT_TRUE(got.ok()) << got.err().to_string();
    auto want =
        single_rank_reference(*full, prompt, num_rows, num_ranks, max_new, temperature, base);
    ASSERT_EQ(got->completions.size(), size_t(num_rows));
    ASSERT_EQ(want.completions.size(), size_t(num_rows));
    for (int i = 0; i < num_rows; ++i) {
      EXPECT_EQ(got->completions[i], want.completions[i]) << "seed " << base << " row " << i;
      ASSERT_EQ(got->logprobs[i].size(), want.logprobs[i].size());
      for (size_t j = 0; j < want.logprobs[i].size(); ++j)
        EXPECT_NEAR(got->logprobs[i][j], want.logprobs[i][j], 1e-5f)
            << "seed " << base << " row " << i << " token " << j;
      tokens += want.logprobs[i].size();
    }
  }
  EXPECT_GT(tokens, size_t(num_rows * 3));  // the comparison covered real generations

  // Back at version 0, the group generates what the single-rank initial policy does.
  ASSERT_TRUE((*group)->reset_to_init().ok());
  auto init = policy::moe_policy::create(small_model(), *local);
  ASSERT_TRUE(init.ok());
  auto got = (*group)->generate(prompt, num_rows, max_new, temperature, 5);
  ASSERT_TRUE(got.ok()) << got.err().to_string();
  auto want = single_rank_reference(**init, prompt, num_rows, num_ranks, max_new, temperature, 5);
  EXPECT_EQ(got->completions, want.completions);
}

TEST_P(ep_rollout,
       several_prompt_groups_in_one_generation_equal_the_single_rank_policy_row_by_row) {
  const int num_ranks = GetParam();
  const int rows_per_prompt = 3, max_new = 6;
  const std::vector<std::vector<token_id>> prompts{
      {3, 5, 7, 4, 2}, {6, 1, 1, 4, 2}, {2, 2, 7, 5, 3}};
  std::vector<std::vector<token_id>> rows;
  for (const auto& p : prompts) rows.insert(rows.end(), rows_per_prompt, p);
  const int num_rows = static_cast<int>(rows.size());
  auto local = policy::make_local_expert_exchange();
  auto full = trained_looking_policy(*local);
  ep_group_shape shape;
  shape.num_ranks = num_ranks;
  shape.max_decode_rows = rows_of_rank(num_rows, 0, num_ranks).count;
  auto group = ep_policy_group::create(node_config(), small_model(), shape);
  ASSERT_TRUE(group.ok()) << group.err().to_string();
  ASSERT_TRUE((*group)->load(full->serialize()).ok());
  auto got = (*group)->generate(rows, max_new, 1.0f, 23);
  ASSERT_TRUE(got.ok()) << got.err().to_string();
  ASSERT_EQ(got->completions.size(), size_t(num_rows));
  // Rank r generated rows rows_of_rank(num_rows, r) (prompts mixed) with its own stream.
  for (int r = 0; r < num_ranks; ++r) {
    auto rr = rows_of_rank(num_rows, r, num_ranks);
    std::vector<std::vector<token_id>> mine(rows.begin() + rr.first,
                                            rows.begin() + rr.first + rr.count);
    std::mt19937_64 rng(rank_sampling_seed(23, r));
    auto want = full->generate(mine, max_new, 1.0f, rng);
    ASSERT_TRUE(want.ok()) << want.err().to_string();
    for (int64_t i = 0; i < rr.count; ++i) {
      EXPECT_EQ(got->completions[rr.first + i], want->completions[i]) << "row " << rr.first + i;
      ASSERT_EQ(got->logprobs[rr.first + i].size(), want->logprobs[i].size());
      for (size_t j = 0; j < want->logprobs[i].size(); ++j)
        EXPECT_NEAR(got->logprobs[rr.first + i][j], want->logprobs[i][j], 1e-5f);
    }
  }
  // Rows of different prompt lengths cannot share the decode steps: refused by name.
  rows.back().push_back(9);
  auto mixed = (*group)->generate(rows, max_new, 1.0f, 23);
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.err().message.find("prompt length"), std::string::npos)
      << mixed.err().to_string();
}

INSTANTIATE_TEST_SUITE_P(ranks, ep_rollout, ::testing::Values(2, 4),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::to_string(i.param) + "ranks";
                         });

TEST(ep_rollout_errors, experts_that_do_not_split_over_the_ranks_are_refused) {
  ep_group_shape shape;
  shape.num_ranks = 3;
  shape.max_decode_rows = 2;
  auto g = ep_policy_group::create(node_config(), small_model(), shape);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.err().code, errc::invalid_config);
  EXPECT_NE(g.err().message.find("does not split over 3"), std::string::npos) << g.err().message;
}

TEST(ep_rollout_errors, bad_weights_and_too_few_rows_are_refused_and_the_group_keeps_working) {
  ep_group_shape shape;
  shape.num_ranks = 2;
  shape.max_decode_rows = 2;
  auto g = ep_policy_group::create(node_config(), small_model(), shape);
  ASSERT_TRUE(g.ok()) << g.err().to_string();
  auto bad = (*g)->load("not a weight version");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.err().code, errc::malformed_message) << bad.err().to_string();
  // Weights of another shape: the tensor is named.
  auto other = small_model();
  other.d_model = 8;
  other.num_heads = 2;
  auto local = policy::make_local_expert_exchange();
  auto wrong = policy::moe_policy::create(other, *local);
  ASSERT_TRUE(wrong.ok());
  auto mismatch = (*g)->load((*wrong)->serialize());
  ASSERT_FALSE(mismatch.ok());
  EXPECT_EQ(mismatch.err().code, errc::invalid_argument) << mismatch.err().to_string();
  auto few = (*g)->generate({3, 4}, 1, 4, 1.0f, 1);
  ASSERT_FALSE(few.ok());
  EXPECT_NE(few.err().message.find("cannot keep 2"), std::string::npos) << few.err().message;
  EXPECT_FALSE((*g)->broken());
  auto ok = (*g)->generate({3, 4}, 4, 4, 1.0f, 1);
  EXPECT_TRUE(ok.ok()) << ok.err().to_string();
}

TEST(ep_rollout_errors, a_rank_that_dies_mid_step_breaks_the_group_with_an_error_not_a_hang) {
  auto cfg = config::load(
      "", {"fabric.provider=shm", "fabric.require_provider=true", "fabric.op_timeout_ms=1000"});
  ASSERT_TRUE(cfg.ok());
  ep_group_shape shape;
  shape.num_ranks = 2;
  shape.max_decode_rows = 2;
  shape.dense_collectives = true;
  auto g = ep_policy_group::create(*cfg, small_model(), shape);
  ASSERT_TRUE(g.ok()) << g.err().to_string();
  // Rank 1 leaves while rank 0 waits for it in a collective: rank 0 gives up after the
  // timeout, and the call reports the lowest failing rank.
  auto st = (*g)->run_on_ranks([](ep_policy_group::rank_context& ctx) -> status {
    if (ctx.rank == 1) return error{errc::peer_dead, "left"};
    float x = 1;
    return ctx.dense->all_reduce_sum(&x, 1, fabric::coll_dtype::fp32);
  });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("rank 0"), std::string::npos) << st.err().message;
  EXPECT_TRUE((*g)->broken());
  // A broken group refuses work (the owner rebuilds it) and still shuts down cleanly.
  auto again = (*g)->generate({3, 4}, 2, 4, 1.0f, 1);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.err().message.find("broken"), std::string::npos) << again.err().message;
  g->reset();
}

}  // namespace
}  // namespace moerl::job
