// The shapes `moerl bench kernels` times, shared by the CPU and CUDA runners.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/routing.h"

namespace moerl::bench {

struct bench_shape {
  std::string name;  // "prefill" or "decode"
  int64_t num_tokens = 0;
  int64_t hidden = 0;
  int num_experts = 0;
  int topk = 0;
  int num_groups = 1;  // DeepSeek-V3: 8 groups, tokens keep the best 4
  int topk_groups = 1;
  int layout_ranks = 1;  // EP ranks for the dispatch layout
  int ffn_ranks = 1;     // EP ranks splitting the experts for the grouped FFN (one rank timed)
  int64_t ffn_dim = 0;   // expert intermediate size

  kernels::routing_params routing() const {
    kernels::routing_params p;
    p.num_experts = num_experts;
    p.topk = topk;
    p.scoring = kernels::score_function::sigmoid;
    p.num_groups = num_groups;
    p.topk_groups = topk_groups;
    p.renormalize = true;
    p.route_scale = 2.5f;
    return p;
  }

  nlohmann::json to_json() const {
    return {{"shape", name},
            {"num_tokens", num_tokens},
            {"hidden", hidden},
            {"num_experts", num_experts},
            {"topk", topk},
            {"num_groups", num_groups},
            {"topk_groups", topk_groups},
            {"layout_ranks", layout_ranks}};
  }
};

struct bench_shapes {
  bench_shape prefill, decode;

  // The anchors' shapes (DeepSeek-V3 / DeepEP): 4096-token prefill and 128-token decode,
  // hidden 7168, top-8 of 256 experts in 8 groups (best 4 kept), expert FFN 2048. The FFN
  // is timed for one rank of a 64-way EP group (4 local experts): a 32-way rank's 8 experts
  // double the seconds per run on a 2-core box without changing the GFLOP/s comparison.
  // quick shrinks every dimension for a smoke run.
  static bench_shapes make(bool quick) {
    bench_shapes s;
    s.prefill = {"prefill", 4096, 7168, 256, 8, 8, 4, 32, 64, 2048};
    s.decode = {"decode", 128, 7168, 256, 8, 8, 4, 32, 64, 2048};
    if (quick) {
      s.prefill = {"prefill", 512, 1024, 64, 8, 8, 4, 8, 16, 256};
      s.decode = {"decode", 32, 1024, 64, 8, 8, 4, 8, 16, 256};
    }
    return s;
  }
};

}  // namespace moerl::bench
