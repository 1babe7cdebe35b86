#include <algorithm>
#include <cmath>

#include "kernels/dtypes.h"
#include "kernels/internal/validate.h"

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

// encode_e4m3 over a span, written without branches (every path computed, one selected) so
// the compiler vectorises it; bit-identical to encode_e4m3 for every input.
void encode_e4m3_span(const float* src, float scale, int64_t n, uint8_t* dst) {
  for (int64_t j = 0; j < n; ++j) {
    const float v = src[j] / scale;
    uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    const uint32_t sign = (u >> 24) & 0x80u;
    const uint32_t mag = u & 0x7fffffffu;
    float a;
    std::memcpy(&a, &mag, sizeof a);
    // Clamped first so the float-to-int conversion stays in range for every lane (inf, NaN).
    const int32_t sub = static_cast<int32_t>(round_small((a < 1.0f ? a : 1.0f) * 512.0f));
    const uint32_t r = mag + 0x7ffffu + ((mag >> 20) & 1u);
    const int32_t exp = static_cast<int32_t>((r >> 23) & 0xffu) - 127;
    const int32_t man = static_cast<int32_t>((r >> 20) & 7u);
    const int32_t normal = ((exp + 7) << 3) | man;
    const bool saturate = exp > 8 || (exp == 8 && man == 7);
    int32_t code = a < 0.015625f ? sub : (saturate ? 0x7e : normal);
    code = mag > 0x7f800000u ? 0x7f : code;
    dst[j] = static_cast<uint8_t>(sign | static_cast<uint32_t>(code));
  }
}

// Largest magnitude of a span. Eight independent running maxima (max is exact, so the order
// does not matter) break the dependency chain and let the compiler use vector registers.
float abs_max(const float* x, int64_t n) {
  float m[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) {
      const float a = std::fabs(x[i + l]);
      m[l] = a > m[l] ? a : m[l];
    }
  for (int l = 0; i < n; ++i, ++l) {
    const float a = std::fabs(x[i]);
    m[l] = a > m[l] ? a : m[l];
  }
  float r = 0.0f;
  for (float v : m) r = v > r ? v : r;
  return r;
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
  pool.parallel_for(
      n,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) y[i] = float_to_bf16(x[i]);
      },
      1 << 14);
  return ok_status();
}

status bf16_to_float(thread_pool& pool, const bf16* x, int64_t n, float* y) {
  KERNELS_REQUIRE(n >= 0, "bf16_to_float", "n = ", n, " is negative");
  pool.parallel_for(
      n,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) y[i] = bf16_to_float(x[i]);
      },
      1 << 14);
  return ok_status();
}

status fp8_quantize(thread_pool& pool, const float* x, int64_t num_rows, int64_t hidden, uint8_t* q,
                    float* scales) {
  KERNELS_REQUIRE(num_rows >= 0 && hidden > 0, "fp8_quantize", "bad shape num_rows = ", num_rows,
                  ", hidden = ", hidden);
  const int64_t nb = fp8_num_blocks(hidden);
  pool.parallel_for(
      num_rows * nb,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const int64_t row = i / nb, blk = i % nb;
          const int64_t lo = blk * fp8_block, hi = std::min(hidden, lo + fp8_block);
          const float* src = x + row * hidden;
          const float amax = abs_max(src + lo, hi - lo);
          // amax / 448 maps the block's largest magnitude onto e4m3's largest finite value.
          const float scale = amax > 0.0f ? amax / fp8_e4m3_max : 1.0f;
          scales[i] = scale;
          encode_e4m3_span(src + lo, scale, hi - lo, q + row * hidden + lo);
        }
      },
      64);
  return ok_status();
}

status fp8_dequantize(thread_pool& pool, const uint8_t* q, const float* scales, int64_t num_rows,
                      int64_t hidden, float* x) {
  KERNELS_REQUIRE(num_rows >= 0 && hidden > 0, "fp8_dequantize", "bad shape num_rows = ", num_rows,
                  ", hidden = ", hidden);
  const int64_t nb = fp8_num_blocks(hidden);
  // All 256 codes decoded once; the loop is then a table lookup and a multiply.
  float table[256];
  for (int c = 0; c < 256; ++c) table[c] = e4m3_to_float(static_cast<uint8_t>(c));
  pool.parallel_for(
      num_rows,
      [&](int64_t b, int64_t e) {
        for (int64_t row = b; row < e; ++row)
          for (int64_t j = 0; j < hidden; ++j)
            x[row * hidden + j] = table[q[row * hidden + j]] * scales[row * nb + j / fp8_block];
      },
      16);
  return ok_status();
}

}  // namespace moerl::kernels
