// Build and node provenance: which compiler, libraries, fabric providers and devices this
// process actually uses. `moerl version --json` prints it and every report and benchmark
// embeds it, so a silently selected slow fallback shows up in the evidence.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

namespace moerl {

// Keys: commit, version, compiler, build_type, caf, libfabric {version, providers[{name,
// rma, msg, cq_data_size, msg_order, mr_mode}]}, zeromq, capnp, spdlog, yaml_cpp, cuda,
// nccl, gpu, blas, host {hostname, cpus}.
nlohmann::json collect_provenance();

// The host's 1/5/15-minute load averages from /proc/loadavg (zeros where it cannot be read):
// on a shared box every benchmark figure is noisy, so reports say how loaded it was.
std::vector<double> host_load_average();

}  // namespace moerl
