// Runs the MPI_Alltoallv peer (bench/ep/mpi_alltoallv_peer.cpp) under mpirun on the
// benchmark's exchange and returns its per-iteration times, or why it could not run.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "bench/ep/ep_bench.h"
#include "common/error.h"

namespace moerl::bench {

// Whether this build has the peer; when not, `why_not` says so.
bool mpi_peer_built(std::string& why_not);

// One process start of the peer: `mpirun -np ranks` over shared memory (btl self,vader), the
// benchmark's workload and iteration counts. JSON: dispatch_us, combine_us, alltoallv_us (per
// timed iteration, slowest rank), mpi_library, command.
result<nlohmann::json> run_mpi_peer_start(const ep_bench_options& o, int64_t tokens_per_rank,
                                          int iterations);

}  // namespace moerl::bench
