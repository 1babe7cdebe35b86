// Storage types of kernels/: bf16 (storage only; arithmetic is fp32) and FP8 e4m3 with one
// fp32 scale per block of 128 elements along the hidden dimension (DeepEP/DeepSeek-V3's
// dispatch format).
#pragma once

#include <cstdint>
#include <cstring>

#include "common/error.h"
#include "kernels/thread_pool.h"

namespace moerl::kernels {

// bfloat16 bits: the upper half of an IEEE fp32. Conversions round to nearest even and keep
// NaN a NaN. Same bits and rounding as torch.bfloat16.
struct bf16 {
  uint16_t bits = 0;
};

inline float bf16_to_float(bf16 v) {
  uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline bf16 float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  // Both candidates are computed and one selected, so loops of this vectorise (no branch).
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // nearest, ties to even
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  const bool is_nan = (u & 0x7fffffffu) > 0x7f800000u;
  return bf16{static_cast<uint16_t>(is_nan ? quiet_nan : rounded)};
}

// Elements per FP8 scale block along the last (hidden) dimension. A hidden size that is not
// a multiple of 128 has a shorter last block with its own scale.
constexpr int64_t fp8_block = 128;
// Largest finite e4m3 ("e4m3fn": no infinities, 0x7f/0xff are NaN) magnitude.
constexpr float fp8_e4m3_max = 448.0f;

inline int64_t fp8_num_blocks(int64_t hidden) { return (hidden + fp8_block - 1) / fp8_block; }

// One value <-> e4m3fn bits, round to nearest even, saturating to +-448 (NaN stays NaN).
uint8_t float_to_e4m3(float v);
float e4m3_to_float(uint8_t bits);

// Bulk conversions. Layouts: x, y [n] contiguous.
status bf16_from_float(thread_pool& pool, const float* x, int64_t n, bf16* y);
status bf16_to_float(thread_pool& pool, const bf16* x, int64_t n, float* y);

// FP8 quantisation per row and per 128-element block.
//   x      [num_rows, hidden] fp32, row-major
//   q      [num_rows, hidden] e4m3fn bits
//   scales [num_rows, fp8_num_blocks(hidden)] fp32: x ~= e4m3_to_float(q) * scale; the scale
//          of a block is amax/448 (1 for an all-zero block), so no element saturates.
status fp8_quantize(thread_pool& pool, const float* x, int64_t num_rows, int64_t hidden, uint8_t* q,
                    float* scales);
status fp8_dequantize(thread_pool& pool, const uint8_t* q, const float* scales, int64_t num_rows,
                      int64_t hidden, float* x);

}  // namespace moerl::kernels
