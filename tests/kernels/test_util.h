// Shared helpers of the kernels/ gtest suites: seeded random tensors and a random routing
// table turned into slots with the real get_dispatch_layout.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/copy_rows.h"
#include "kernels/dispatch_layout.h"

namespace moerl::kernels::testing {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

// Distinct experts per token (as routing produces), with a fraction of entries masked.
inline std::vector<int64_t> random_topk_idx(int64_t T, int K, int E, uint32_t seed,
                                            double masked_fraction = 0.0) {
  std::mt19937 gen(seed);
  std::vector<int64_t> idx(T * K);
  std::vector<int> perm(E);
  for (int64_t t = 0; t < T; ++t) {
    for (int e = 0; e < E; ++e) perm[e] = e;
    std::shuffle(perm.begin(), perm.end(), gen);
    for (int k = 0; k < K; ++k)
      idx[t * K + k] =
          std::uniform_real_distribution<double>(0, 1)(gen) < masked_fraction ? -1 : perm[k];
  }
  return idx;
}

struct slots {
  std::vector<int64_t> slot, offset;
  int64_t num_rows = 0;
};

inline slots make_slots(thread_pool& pool, const std::vector<int64_t>& idx, int64_t T, int K, int E,
                        int align = 1) {
  slots s;
  s.slot.resize(T * K);
  s.offset.resize(E + 1);
  std::vector<int64_t> pe(E), pr(1);
  std::vector<uint8_t> ir(T);
  dispatch_layout_out out{pe.data(), pr.data(), ir.data(), nullptr, s.offset.data(), s.slot.data()};
  if (!get_dispatch_layout(pool, idx.data(), {T, K, E, 1, align}, out).ok()) std::abort();
  s.num_rows = s.offset[E];
  return s;
}

// A row copy plan as offsets into a source and a destination byte buffer: rows of 16-byte
// multiples at 16-byte offsets (the device's vector path), odd sizes and offsets (its byte
// path), a 0-byte copy, and rows written in an order unrelated to where they come from.
struct copy_offsets {
  int64_t dst = 0, src = 0, bytes = 0;
};
inline std::vector<copy_offsets> random_copy_offsets(int64_t num_copies, uint32_t seed,
                                                     int64_t* dst_bytes, int64_t* src_bytes) {
  std::mt19937 rng(seed);
  std::vector<copy_offsets> plan;
  auto align16 = [](int64_t v) { return (v + 15) / 16 * 16; };
  int64_t dst = 0, src = 0;
  for (int64_t i = 0; i < num_copies; ++i) {
    const bool aligned = i % 3 != 2;
    const int64_t bytes = i == 1 ? 0 : aligned ? 16 * (1 + rng() % 40) : 1 + rng() % 300;
    // The unaligned copies start one byte into their 16-byte slot, at both ends.
    plan.push_back({dst + (aligned ? 0 : 1), src + (aligned ? 0 : 1), bytes});
    dst = align16(dst + bytes + 17);  // a gap the copies must leave untouched
    src = align16(src + bytes + 33);
  }
  std::shuffle(plan.begin(), plan.end(), rng);  // a plan has no order
  *dst_bytes = dst;
  *src_bytes = src;
  return plan;
}
inline std::vector<row_copy> plan_on(const std::vector<copy_offsets>& offsets, char* dst,
                                     const char* src) {
  std::vector<row_copy> copies;
  for (const copy_offsets& c : offsets) copies.push_back({dst + c.dst, src + c.src, c.bytes});
  return copies;
}

}  // namespace moerl::kernels::testing
