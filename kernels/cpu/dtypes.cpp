#include <algorithm>
#include <cmath>
#include <cstring>

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

// encode_e4m3 of src[j] / scale over a span, 8 elements per step in 8-lane vectors: every
// path computed and one selected per lane by masks, each step the same integer and fp32
// operations as encode_e4m3 (the division exact in both), so bit-identical to it for every
// input; the tail goes through encode_e4m3 itself. GCC did not vectorise the scalar loop this
// replaces (a divss and two branches per element: a third of the CPU samples of
// low_latency_dispatch's use_fp8=True on the decode shape, bench/python_ep/README.md). Built twice
// (target_clones) and picked when the library loads: AVX2 where the CPU has it, the baseline
// ISA's SSE2 elsewhere; neither may contract (-ffp-contract=off; "avx2" enables no FMA), and
// vectors stay inside the function (their ABI differs between the clones).
__attribute__((target_clones("avx2", "default"))) void encode_e4m3_span(const float* src,
                                                                        float scale, int64_t n,
                                                                        uint8_t* dst) {
  typedef float v8f32 __attribute__((vector_size(32)));
  typedef uint32_t v8u32 __attribute__((vector_size(32)));
  typedef int32_t v8i32 __attribute__((vector_size(32)));
  typedef uint8_t v8u8 __attribute__((vector_size(8)));
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    v8f32 v;
    std::memcpy(&v, src + j, sizeof v);
    v = v / scale;
    v8u32 u;
    std::memcpy(&u, &v, sizeof u);
    const v8u32 sign = (u >> 24) & 0x80u;
    const v8u32 mag = u & 0x7fffffffu;
    v8f32 a;
    std::memcpy(&a, &mag, sizeof a);
    // Subnormal grid of 2^-9, from a clamped to 1 (the conversion stays in range for inf/NaN).
    const v8i32 below_one = a < 1.0f;
    v8f32 clamped;
    {
      v8u32 ab, one;
      const v8f32 ones = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
      std::memcpy(&ab, &a, sizeof ab);
      std::memcpy(&one, &ones, sizeof one);
      const v8u32 sel = (ab & (v8u32)below_one) | (one & ~(v8u32)below_one);
      std::memcpy(&clamped, &sel, sizeof clamped);
    }
    const v8f32 rounded = (clamped * 512.0f + 8388608.0f) - 8388608.0f;
    const v8i32 sub = __builtin_convertvector(rounded, v8i32);
    const v8u32 r = mag + 0x7ffffu + ((mag >> 20) & 1u);
    const v8i32 exp = (v8i32)((r >> 23) & 0xffu) - 127;
    const v8i32 man = (v8i32)((r >> 20) & 7u);
    const v8i32 normal = ((exp + 7) << 3) | man;
    const v8i32 saturate = (exp > 8) | ((exp == 8) & (man == 7));
    const v8i32 small = a < 0.015625f;
    v8i32 code = (saturate & 0x7e) | (~saturate & normal);
    code = (small & sub) | (~small & code);
    const v8i32 nan = (v8i32)(mag > 0x7f800000u);
    code = (nan & 0x7f) | (~nan & code);
    const v8u8 out = __builtin_convertvector(sign | (v8u32)code, v8u8);
    std::memcpy(dst + j, &out, sizeof out);
  }
  for (; j < n; ++j) dst[j] = encode_e4m3(src[j] / scale);
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
