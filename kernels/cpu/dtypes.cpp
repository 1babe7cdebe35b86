#include <algorithm>
#include <cmath>

#include "kernels/cpu/validate.h"
#include "kernels/dtypes.h"

namespace moerl::kernels {

namespace {

// Round-to-nearest-even of a value in [0, 8) to an integer without a libm call: adding 2^23
// pushes the fraction out of the mantissa under the default rounding mode.
inline float round_small(float v) { return (v + 8388608.0f) - 8388608.0f; }

// The encoder, inline so the quantise loop has no call per element.
inline uint8_t encode_e4m3(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return sign | 0x7fu;  // NaN
  float a;
  std::memcpy(&a, &u, sizeof a);
  if (a < 0.015625f) {  // below 2^-6: subnormal grid of 2^-9; 8 * 2^-9 encodes as 0x08
    return sign | static_cast<uint8_t>(round_small(a * 512.0f));
  }
  // Round the 23-bit mantissa to 3 bits, ties to even; a carry bumps the exponent.
  u += 0x7ffffu + ((u >> 20) & 1u);
  const int exp = static_cast<int>((u >> 23) & 0xffu) - 127;
  const uint32_t man = (u >> 20) & 7u;
  if (exp > 8 || (exp == 8 && man == 7)) return sign | 0x7eu;  // saturate to 448
  return sign | static_cast<uint8_t>(((exp + 7) << 3) | man);
}

}  // namespace

uint8_t float_to_e4m3(float v) { return encode_e4m3(v); }

float e4m3_to_float(uint8_t bits) {
  const float sign = (bits & 0x80u) ? -1.0f : 1.0f;
  const int exp = (bits >> 3) & 0xf;
  const int man = bits & 7;
  if (exp == 0xf && man == 7) return std::nanf("");
  if (exp == 0) return sign * std::ldexp(static_cast<float>(man), -9);
  return sign * std::ldexp(1.0f + man / 8.0f, exp - 7);
}

status bf16_from_float(thread_pool& pool, const float* x, int64_t n, bf16* y) {
  KERNELS_REQUIRE(n >= 0, "bf16_from_float", "n = ", n, " is negative");
  pool.parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = float_to_bf16(x[i]);
  }, 1 << 14);
  return ok_status();
}

status bf16_to_float(thread_pool& pool, const bf16* x, int64_t n, float* y) {
  KERNELS_REQUIRE(n >= 0, "bf16_to_float", "n = ", n, " is negative");
  pool.parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = bf16_to_float(x[i]);
  }, 1 << 14);
  return ok_status();
}

status fp8_quantize(thread_pool& pool, const float* x, int64_t num_rows, int64_t hidden,
                    uint8_t* q, float* scales) {
  KERNELS_REQUIRE(num_rows >= 0 && hidden > 0, "fp8_quantize", "bad shape num_rows = ",
                  num_rows, ", hidden = ", hidden);
  const int64_t nb = fp8_num_blocks(hidden);
  pool.parallel_for(num_rows * nb, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t row = i / nb, blk = i % nb;
      const int64_t lo = blk * fp8_block, hi = std::min(hidden, lo + fp8_block);
      const float* src = x + row * hidden;
      float amax = 0.0f;
      for (int64_t j = lo; j < hi; ++j) amax = std::max(amax, std::fabs(src[j]));
      // amax / 448 maps the block's largest magnitude onto e4m3's largest finite value.
      const float scale = amax > 0.0f ? amax / fp8_e4m3_max : 1.0f;
      scales[i] = scale;
      for (int64_t j = lo; j < hi; ++j) q[row * hidden + j] = encode_e4m3(src[j] / scale);
    }
  }, 64);
  return ok_status();
}

status fp8_dequantize(thread_pool& pool, const uint8_t* q, const float* scales,
                      int64_t num_rows, int64_t hidden, float* x) {
  KERNELS_REQUIRE(num_rows >= 0 && hidden > 0, "fp8_dequantize", "bad shape num_rows = ",
                  num_rows, ", hidden = ", hidden);
  const int64_t nb = fp8_num_blocks(hidden);
  // All 256 codes decoded once; the loop is then a table lookup and a multiply.
  float table[256];
  for (int c = 0; c < 256; ++c) table[c] = e4m3_to_float(static_cast<uint8_t>(c));
  pool.parallel_for(num_rows, [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row)
      for (int64_t j = 0; j < hidden; ++j)
        x[row * hidden + j] = table[q[row * hidden + j]] * scales[row * nb + j / fp8_block];
  }, 16);
  return ok_status();
}

}  // namespace moerl::kernels
