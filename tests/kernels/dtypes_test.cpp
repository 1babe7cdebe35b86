#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/dtypes.h"
#include "test_util.h"

using namespace moerl::kernels;
using namespace moerl::kernels::testing;

TEST(dtypes, bf16_rounds_to_nearest_even_and_keeps_nan) {
  EXPECT_EQ(float_to_bf16(1.0f).bits, 0x3f80);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties to even (down to 1.0).
  EXPECT_EQ(float_to_bf16(1.00390625f).bits, 0x3f80);
  // 1 + 3 * 2^-8 is halfway too: ties to even (up).
  EXPECT_EQ(float_to_bf16(1.01171875f).bits, 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  EXPECT_EQ(bf16_to_float(float_to_bf16(-3.5f)), -3.5f);
}

TEST(dtypes, every_finite_e4m3_code_round_trips_exactly) {
  for (int c = 0; c < 256; ++c) {
    const float v = e4m3_to_float(static_cast<uint8_t>(c));
    if (std::isnan(v)) {
      EXPECT_TRUE((c & 0x7f) == 0x7f) << c;
      continue;
    }
    if (c == 0x80) continue;  // -0 encodes back as -0 too, but compare bits below
    EXPECT_EQ(float_to_e4m3(v), c) << "code " << c << " value " << v;
  }
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
}

TEST(dtypes, e4m3_saturates_at_448_and_rounds_ties_to_even) {
  EXPECT_EQ(float_to_e4m3(1000.0f), 0x7e);
  EXPECT_EQ(float_to_e4m3(-1000.0f), 0xfe);
  EXPECT_EQ(float_to_e4m3(460.0f), 0x7e);
  // 1.0625 is halfway between 1.0 (0x38) and 1.125 (0x39): even mantissa wins.
  EXPECT_EQ(float_to_e4m3(1.0625f), 0x38);
  EXPECT_EQ(float_to_e4m3(1.1875f), 0x3a);  // halfway 1.125..1.25 -> 1.25 (even)
}

TEST(dtypes, fp8_block_quantisation_round_trip_stays_within_half_an_ulp_of_the_block) {
  thread_pool pool(2);
  for (int64_t H : {1, 127, 128, 300, 7168}) {
    const int64_t rows = 5;
    auto x = random_floats(rows * H, static_cast<uint32_t>(H), -30.0f, 30.0f);
    for (int64_t j = 0; j < H && j < 128; ++j) x[j] = 0.0f;  // an all-zero block
    const int64_t nb = fp8_num_blocks(H);
    std::vector<uint8_t> q(rows * H);
    std::vector<float> scales(rows * nb), back(rows * H);
    ASSERT_TRUE(fp8_quantize(pool, x.data(), rows, H, q.data(), scales.data()).ok());
    ASSERT_TRUE(fp8_dequantize(pool, q.data(), scales.data(), rows, H, back.data()).ok());
    EXPECT_EQ(scales[0], 1.0f);
    for (int64_t i = 0; i < rows * H; ++i) {
      const float s = scales[(i / H) * nb + (i % H) / 128];
      // 3 mantissa bits: relative error <= 2^-4 for normals, absolute <= 2^-10 * s below.
      const float tol = std::max(std::fabs(x[i]) * 0.0625f, s * std::ldexp(1.0f, -10)) * 1.0001f;
      ASSERT_LE(std::fabs(back[i] - x[i]), tol) << "H " << H << " i " << i;
    }
  }
}

TEST(dtypes, the_vectorised_block_encoder_agrees_with_the_scalar_encoder_on_every_code) {
  thread_pool pool(1);
  // A block whose amax is 448 has scale 1, so fp8_quantize must emit each value's own code.
  std::vector<float> x;
  for (int c = 0; c < 256; ++c) {
    const float v = e4m3_to_float(static_cast<uint8_t>(c));
    if (!std::isnan(v)) x.push_back(v);
  }
  // Values between codes, ties and out-of-range magnitudes too.
  for (float v : {1.0625f, 1.1875f, 0.0009765625f, 0.00146484375f, 300.5f, 447.9f, -0.013f})
    x.push_back(v);
  const int64_t H = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(H);
  std::vector<float> scales(fp8_num_blocks(H));
  ASSERT_TRUE(fp8_quantize(pool, x.data(), 1, H, q.data(), scales.data()).ok());
  for (int64_t b = 0; b < fp8_num_blocks(H); ++b) {
    float amax = 0;
    for (int64_t j = b * 128; j < std::min(H, (b + 1) * 128); ++j)
      amax = std::max(amax, std::fabs(x[j]));
    ASSERT_EQ(scales[b], amax / 448.0f);
    for (int64_t j = b * 128; j < std::min(H, (b + 1) * 128); ++j)
      ASSERT_EQ(q[j], float_to_e4m3(x[j] / scales[b])) << "value " << x[j];
  }
}

TEST(dtypes, the_vectorised_block_encoder_agrees_with_the_scalar_encoder_on_random_bit_patterns) {
  // Every exponent (subnormals, values that saturate or round across a binade, infinities and
  // NaNs among them), and a hidden size whose blocks end in a tail shorter than 8 lanes.
  thread_pool pool(1);
  std::mt19937 gen(25);
  const int64_t H = 3 * 128 + 13, rows = 64;
  std::vector<float> x(rows * H);
  for (float& v : x) {
    const uint32_t bits = static_cast<uint32_t>(gen());
    std::memcpy(&v, &bits, sizeof v);
  }
  // Blocks of one scale, so the codes near the subnormal and saturation edges occur too.
  for (int64_t i = 0; i < H; ++i) x[i] = std::ldexp(static_cast<float>(i % 97) - 48.0f, -3);
  std::vector<uint8_t> q(rows * H);
  std::vector<float> scales(rows * fp8_num_blocks(H));
  ASSERT_TRUE(fp8_quantize(pool, x.data(), rows, H, q.data(), scales.data()).ok());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < H; ++j) {
      const float s = scales[r * fp8_num_blocks(H) + j / 128];
      ASSERT_EQ(q[r * H + j], float_to_e4m3(x[r * H + j] / s))
          << "row " << r << " element " << j << " value " << x[r * H + j] << " scale " << s;
    }
}
