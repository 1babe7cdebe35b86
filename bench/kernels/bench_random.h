// Benchmark inputs: uniform floats in [-scale, scale) from a xorshift generator. The prefill
// weights are ~350M floats, and a normal distribution from mt19937 would take longer than
// the kernels being timed. Shared by the CPU and CUDA benchmarks so both time the same data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace moerl::bench {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale) {
  std::vector<float> v(n);
  uint64_t s = 0x9e3779b97f4a7c15ull * (seed + 1);
  for (auto& x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = scale * (static_cast<float>(s >> 40) * (2.0f / 16777216.0f) - 1.0f);
  }
  return v;
}

}  // namespace moerl::bench
