// The CPU twin of the batched row copies (kernels/copy_rows.h), which fabric's low-latency
// mode runs on host memory in place of the CUDA twin (kernels_cuda_twins_test compares them).
#include "kernels/copy_rows.h"

#include <gtest/gtest.h>

#include <vector>

#include "test_util.h"

using namespace moerl::kernels;
using namespace moerl::kernels::testing;

TEST(copy_rows, every_copy_of_a_plan_lands_and_the_bytes_between_them_stay) {
  thread_pool pool(2);
  int64_t dst_bytes = 0, src_bytes = 0;
  const auto offsets = random_copy_offsets(200, 7, &dst_bytes, &src_bytes);
  std::vector<char> src(static_cast<size_t>(src_bytes)), dst(static_cast<size_t>(dst_bytes), '#');
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 31 + 7);
  const auto copies = plan_on(offsets, dst.data(), src.data());
  ASSERT_TRUE(copy_rows(pool, copies.data(), static_cast<int64_t>(copies.size())).ok());
  std::vector<char> want(dst.size(), '#');
  for (const copy_offsets& c : offsets)
    for (int64_t b = 0; b < c.bytes; ++b) want[c.dst + b] = src[c.src + b];
  EXPECT_EQ(dst, want);
}

TEST(copy_rows, an_empty_plan_copies_nothing_and_bad_copies_are_errors_naming_them) {
  thread_pool pool(1);
  EXPECT_TRUE(copy_rows(pool, nullptr, 0).ok());
  char a[4] = {1, 2, 3, 4}, b[4] = {};
  const row_copy bad_size[] = {{b, a, 4}, {b, a, -1}};
  auto st = copy_rows(pool, bad_size, 2);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.err().message, "copy_rows: copy 1 has bytes = -1, negative");
  EXPECT_EQ(b[0], 0) << "a plan with a bad copy copies nothing";
  const row_copy null_src[] = {{b, nullptr, 2}};
  st = copy_rows(pool, null_src, 1);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.err().message, "copy_rows: copy 0 of 2 bytes has a null src");
  const row_copy empty_null[] = {{nullptr, nullptr, 0}};
  EXPECT_TRUE(copy_rows(pool, empty_null, 1).ok()) << "a 0-byte copy needs no pointers";
  EXPECT_FALSE(copy_rows(pool, bad_size, -1).ok());
}
