// CUDA, NCCL and GPU facts for provenance. Built with CUDA, it asks the runtime and
// driver; without CUDA (or without a visible GPU) the fields say "absent" / "none".
#pragma once

#ifndef MOERL_INSIDE_moerl_provenance
#error \
    "provenance/internal/gpu_info.h is private to moerl_provenance (provenance/): include its public headers"
#endif

#include <nlohmann/json.hpp>

namespace moerl {

struct gpu_report {
  nlohmann::json cuda;  // {"runtime": "13.0", "driver": "13.0"} or "absent"
  nlohmann::json nccl;  // "2.x.y" or "absent"
  nlohmann::json gpu;   // [{"name", "compute_capability"}] or "none"
};

gpu_report probe_gpu();

}  // namespace moerl
