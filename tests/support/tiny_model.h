// The tiny MoE policy shape tests build models from: 2 layers, d_model 16, 2 heads, 4 experts
// (top-2), FFN width 8. Small enough that a test's forward/backward passes take milliseconds,
// big enough that every expert-parallel split (1, 2, 4 ranks) has experts on each rank.
#pragma once

#ifndef MOERL_TEST_CODE
#error \
    "tests/support/tiny_model.h is test code: production code (benches too) must not include tests/"
#endif

#include <cstdint>

#include "policy/model.h"

namespace moerl::testing {

inline policy::model_config tiny_model(uint64_t seed, int max_seq_len = 14) {
  policy::model_config c;
  c.max_seq_len = max_seq_len;
  c.d_model = 16;
  c.num_layers = 2;
  c.num_heads = 2;
  c.num_experts = 4;
  c.top_k = 2;
  c.ffn_dim = 8;
  c.seed = seed;
  return c;
}

}  // namespace moerl::testing
