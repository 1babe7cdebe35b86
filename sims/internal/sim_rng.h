// Deterministic randomness for scenario expansion. The standard library's distributions are
// implementation-defined (libstdc++ and libc++ give different uniform_int_distribution
// sequences), and a scenario + seed must expand to the same timeline everywhere, so the
// generator (splitmix64) and the transforms below are spelled out here.
#pragma once

#ifndef MOERL_INSIDE_moerl_sims
#error "sims/internal/sim_rng.h is private to moerl_sims (sims/): include its public headers"
#endif

#include <cmath>
#include <cstdint>

namespace moerl::sims {

class sim_rng {
 public:
  // Streams keyed by (seed, stream): adding a fault to a scenario must not change the random
  // choices of the faults before it, so each fault draws from its own stream.
  sim_rng(uint64_t seed, uint64_t stream)
      : state_(mix(seed ^ mix(stream + 0x9e3779b97f4a7c15ULL))) {}

  uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    return mix(state_);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n), n > 0; rejection sampling removes modulo bias.
  uint64_t below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do {
      x = next();
    } while (x >= limit);
    return x % n;
  }
  // Exponential with the given rate (events per unit time), rate > 0.
  double exponential(double rate) { return -std::log1p(-uniform()) / rate; }

 private:
  static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  uint64_t state_;
};

}  // namespace moerl::sims
