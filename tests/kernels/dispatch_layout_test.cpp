#include <gtest/gtest.h>

#include <vector>

#include "kernels/dispatch_layout.h"

using namespace moerl::kernels;

namespace {

struct layout {
  std::vector<int64_t> per_expert, per_rank, rank_slot, offset, slot;
  std::vector<uint8_t> in_rank;
};

layout run(thread_pool& pool, const std::vector<int64_t>& idx, int64_t T, int K, int E, int R,
           int align = 1) {
  layout l;
  l.per_expert.assign(E, -7);
  l.per_rank.assign(R, -7);
  l.in_rank.assign(T * R, 7);
  l.rank_slot.assign(T * R, -7);
  l.offset.assign(E + 1, -7);
  l.slot.assign(T * K, -7);
  dispatch_layout_params p{T, K, E, R, align};
  dispatch_layout_out out{l.per_expert.data(), l.per_rank.data(), l.in_rank.data(),
                          l.rank_slot.data(),  l.offset.data(),   l.slot.data()};
  auto st = get_dispatch_layout(pool, idx.data(), p, out);
  EXPECT_TRUE(st.ok()) << st.err().to_string();
  return l;
}

}  // namespace

TEST(dispatch_layout, counts_ranks_and_slots_for_a_small_hand_checked_table) {
  thread_pool pool(2);
  // 4 experts on 2 ranks (experts 0,1 -> rank 0; 2,3 -> rank 1), top-2, one masked entry.
  const std::vector<int64_t> idx = {0, 3,   // token 0: ranks 0 and 1
                                    1, 0,   // token 1: rank 0 twice -> sent once
                                    2, -1,  // token 2: rank 1, one masked entry
                                    3, 1};  // token 3: ranks 1 and 0
  auto l = run(pool, idx, 4, 2, 4, 2);
  EXPECT_EQ(l.per_expert, (std::vector<int64_t>{2, 2, 1, 2}));
  EXPECT_EQ(l.per_rank, (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(l.in_rank, (std::vector<uint8_t>{1, 1, 1, 0, 0, 1, 1, 1}));
  EXPECT_EQ(l.rank_slot, (std::vector<int64_t>{0, 0, 1, -1, -1, 1, 2, 2}));
  EXPECT_EQ(l.offset, (std::vector<int64_t>{0, 2, 4, 5, 7}));
  // Inside an expert rows follow token order: expert 0 gets (0,0) then (1,1).
  EXPECT_EQ(l.slot, (std::vector<int64_t>{0, 5, 2, 1, 4, -1, 6, 3}));
}

TEST(dispatch_layout, zero_tokens_gives_zero_counts_and_an_empty_buffer) {
  thread_pool pool(2);
  auto l = run(pool, {}, 0, 8, 16, 4);
  EXPECT_EQ(l.per_expert, std::vector<int64_t>(16, 0));
  EXPECT_EQ(l.per_rank, std::vector<int64_t>(4, 0));
  EXPECT_EQ(l.offset, std::vector<int64_t>(17, 0));
}

TEST(dispatch_layout, all_tokens_to_one_expert_fill_one_contiguous_block) {
  thread_pool pool(2);
  const int64_t T = 300;
  std::vector<int64_t> idx(T, 5);
  auto l = run(pool, idx, T, 1, 8, 4);
  EXPECT_EQ(l.per_expert[5], T);
  EXPECT_EQ(l.per_rank, (std::vector<int64_t>{0, 0, T, 0}));
  for (int64_t t = 0; t < T; ++t) EXPECT_EQ(l.slot[t], t);
  EXPECT_EQ(l.offset[5], 0);
  EXPECT_EQ(l.offset[6], T);
}

TEST(dispatch_layout, topk_equal_to_num_experts_sends_every_token_to_every_rank) {
  thread_pool pool(2);
  const int64_t T = 10;
  const int E = 4;
  std::vector<int64_t> idx;
  for (int64_t t = 0; t < T; ++t)
    for (int k = 0; k < E; ++k) idx.push_back((k + t) % E);
  auto l = run(pool, idx, T, E, E, 2);
  EXPECT_EQ(l.per_expert, std::vector<int64_t>(E, T));
  EXPECT_EQ(l.per_rank, std::vector<int64_t>(2, T));
  EXPECT_EQ(l.offset[E], T * E);
}

TEST(dispatch_layout, alignment_pads_each_expert_block_and_slots_stay_unique) {
  thread_pool pool(2);
  const std::vector<int64_t> idx = {0, 1, 0, 2, 0, -1};
  auto l = run(pool, idx, 3, 2, 3, 1, 4);
  EXPECT_EQ(l.per_expert, (std::vector<int64_t>{3, 1, 1}));
  EXPECT_EQ(l.offset, (std::vector<int64_t>{0, 4, 8, 12}));
  EXPECT_EQ(l.slot, (std::vector<int64_t>{0, 4, 1, 8, 2, -1}));
}

TEST(dispatch_layout, an_out_of_range_expert_id_is_an_error_naming_the_entry) {
  thread_pool pool(2);
  const std::vector<int64_t> idx = {0, 1, 9, 2};
  std::vector<int64_t> pe(4), pr(2);
  std::vector<uint8_t> ir(4);
  dispatch_layout_params p{2, 2, 4, 2, 1};
  auto st = get_dispatch_layout(pool, idx.data(), p, {pe.data(), pr.data(), ir.data()});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.err().code, moerl::errc::invalid_argument);
  EXPECT_NE(st.err().message.find("topk_idx[1, 0] = 9"), std::string::npos) << st.err().message;
}

TEST(dispatch_layout, experts_not_divisible_by_ranks_is_an_error) {
  thread_pool pool(1);
  std::vector<int64_t> pe(5), pr(2);
  std::vector<uint8_t> ir(2);
  const int64_t idx[1] = {0};
  auto st = get_dispatch_layout(pool, idx, {1, 1, 5, 2, 1}, {pe.data(), pr.data(), ir.data()});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("num_ranks"), std::string::npos);
}

// The CUDA twin's copy of the argument checks once skipped this one (both now share
// detail::check_dispatch_layout_args): tokens to route and no table is an error naming the
// argument, while zero tokens need no table.
TEST(dispatch_layout, a_null_topk_idx_with_tokens_is_an_error_and_without_tokens_is_not) {
  thread_pool pool(1);
  std::vector<int64_t> pe(4, -7), pr(2, -7);
  std::vector<uint8_t> ir(6);
  auto st = get_dispatch_layout(pool, nullptr, {3, 2, 4, 2, 1}, {pe.data(), pr.data(), ir.data()});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.err().code, moerl::errc::invalid_argument);
  EXPECT_EQ(st.err().message, "get_dispatch_layout: topk_idx is null");
  EXPECT_EQ(pe, std::vector<int64_t>(4, -7)) << "outputs written before the check failed";

  st = get_dispatch_layout(pool, nullptr, {0, 2, 4, 2, 1}, {pe.data(), pr.data(), nullptr});
  ASSERT_TRUE(st.ok()) << st.err().to_string();
  EXPECT_EQ(pe, std::vector<int64_t>(4, 0));
  EXPECT_EQ(pr, std::vector<int64_t>(2, 0));
}
