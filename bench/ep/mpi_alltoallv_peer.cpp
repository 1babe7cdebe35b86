// moerl-ep-mpi-peer: the generic all-to-all that `moerl bench ep` measures beside its modes.
// Started by the benchmark under `mpirun -np <ranks>`; every rank regenerates the benchmark's
// workload (fabric/ep_workload.h, same seed, same routing, same rows, same dtype) and runs the
// exchange the way an MPI user writes it:
//   dispatch: pack one row per (token, destination rank) straight from the tokens (hidden
//             bytes, then normal mode's metadata: token, source, topk ids, topk weights),
//             MPI_Alltoall of the row counts, MPI_Alltoallv of the rows, then the rows fanned
//             out into expert-major order (what ep_group's dispatch returns);
//   combine:  each received row reduced over its local experts (identity experts, fp32, one
//             rounding), MPI_Alltoallv of the partials back, and the source's sum of its
//             partials in rank order.
// Timing matches the benchmark's: a barrier before each phase, each rank's time per phase,
// the slowest rank per iteration. Rank 0 writes JSON to --out: the per-iteration times,
// plus the time inside MPI_Alltoallv alone (the library's share of each phase).
#define OMPI_SKIP_MPICXX 1  // the C API only; the C++ bindings need libmpi_cxx
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fabric/ep_protocol.h"
#include "fabric/ep_workload.h"
#include "kernels/dtypes.h"

namespace {

using namespace moerl::fabric;
using clk = std::chrono::steady_clock;

double us_since(clk::time_point t0) {
  return std::chrono::duration<double, std::micro>(clk::now() - t0).count();
}

struct peer_args {
  int64_t tokens_per_rank = 0, hidden = 0;
  int experts = 0, topk = 0, iterations = 0, warmup = 0;
  std::string routing, out;
  uint64_t seed = 0;
};

bool parse(int argc, char** argv, peer_args& a) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--tokens")
      a.tokens_per_rank = std::stoll(v);
    else if (k == "--hidden")
      a.hidden = std::stoll(v);
    else if (k == "--experts")
      a.experts = std::stoi(v);
    else if (k == "--topk")
      a.topk = std::stoi(v);
    else if (k == "--iterations")
      a.iterations = std::stoi(v);
    else if (k == "--warmup")
      a.warmup = std::stoi(v);
    else if (k == "--routing")
      a.routing = v;
    else if (k == "--seed")
      a.seed = std::stoull(v);
    else if (k == "--out")
      a.out = v;
    else
      return false;
  }
  return a.tokens_per_rank > 0 && a.hidden > 0 && a.experts > 0 && a.topk > 0 && a.iterations > 0 &&
         !a.out.empty();
}

// One rank's exchange state, reused across iterations (buffers sized once, like ep_group's).
struct exchange {
  const workload_params& p;
  const rank_inputs& in;
  int rank, num_ranks, num_local;
  int64_t hidden_bytes, row_bytes;
  std::vector<int> send_rows, recv_rows, sdispl, rdispl, scount, rcount;
  std::vector<int64_t> dest_pos;  // [num_tokens, num_ranks] row among those for d, -1 if none
  std::vector<char> send, recv, expert_major, partial_send, partial_recv, y;
  double alltoallv_us = 0;

  exchange(const workload_params& wp, const rank_inputs& ri, int r, int n)
      : p(wp), in(ri), rank(r), num_ranks(n), num_local(wp.num_experts / n) {
    hidden_bytes = p.hidden * 2;
    row_bytes = proto::align_up(hidden_bytes + proto::normal_meta_bytes(p.topk), 16);
    send_rows.assign(n, 0);
    recv_rows.assign(n, 0);
    sdispl.assign(n, 0);
    rdispl.assign(n, 0);
    scount.assign(n, 0);
    rcount.assign(n, 0);
    send.resize(static_cast<size_t>(in.num_tokens * n * row_bytes));
    recv.resize(static_cast<size_t>(p.tokens_per_rank * n * row_bytes));
    partial_send.resize(static_cast<size_t>(p.tokens_per_rank * n * hidden_bytes));
    partial_recv.resize(static_cast<size_t>(in.num_tokens * n * hidden_bytes));
    y.resize(static_cast<size_t>(std::max<int64_t>(in.num_tokens, 1) * hidden_bytes));
  }

  int64_t total(const std::vector<int>& v) const {
    int64_t t = 0;
    for (int c : v) t += c;
    return t;
  }
  void alltoallv(const char* s, const std::vector<int>& srows, char* r,
                 const std::vector<int>& rrows, int64_t bytes_per_row) {
    // Rows are counted in units of one contiguous MPI type, so counts stay in int range.
    MPI_Datatype row;
    MPI_Type_contiguous(static_cast<int>(bytes_per_row), MPI_BYTE, &row);
    MPI_Type_commit(&row);
    int so = 0, ro = 0;
    for (int d = 0; d < num_ranks; ++d) {
      scount[d] = srows[d];
      sdispl[d] = so;
      so += srows[d];
      rcount[d] = rrows[d];
      rdispl[d] = ro;
      ro += rrows[d];
    }
    const auto t0 = clk::now();
    MPI_Alltoallv(s, scount.data(), sdispl.data(), row, r, rcount.data(), rdispl.data(), row,
                  MPI_COMM_WORLD);
    alltoallv_us += us_since(t0);
    MPI_Type_free(&row);
  }

  void dispatch() {
    const int n = num_ranks, topk = p.topk, le = num_local;
    std::fill(send_rows.begin(), send_rows.end(), 0);
    dest_pos.assign(static_cast<size_t>(in.num_tokens * n), -1);
    for (int64_t t = 0; t < in.num_tokens; ++t)
      for (int k = 0; k < topk; ++k) {
        const int64_t e = in.topk_idx[t * topk + k];
        if (e < 0) continue;
        int64_t& pos = dest_pos[t * n + e / le];
        if (pos < 0) pos = send_rows[e / le]++;
      }
    std::vector<int64_t> first(n, 0);
    for (int d = 1; d < n; ++d) first[d] = first[d - 1] + send_rows[d - 1];
    for (int64_t t = 0; t < in.num_tokens; ++t)
      for (int d = 0; d < n; ++d) {
        const int64_t pos = dest_pos[t * n + d];
        if (pos < 0) continue;
        char* row = send.data() + (first[d] + pos) * row_bytes;
        std::memcpy(row, in.x.data() + t * hidden_bytes, hidden_bytes);
        char* meta = row + hidden_bytes;
        const int32_t token = static_cast<int32_t>(t), src = rank;
        std::memcpy(meta, &token, 4);
        std::memcpy(meta + 4, &src, 4);
        for (int k = 0; k < topk; ++k) {
          const auto e = static_cast<int32_t>(in.topk_idx[t * topk + k]);
          std::memcpy(meta + 8 + 4 * k, &e, 4);
        }
        std::memcpy(meta + 8 + 4 * topk, in.topk_weights.data() + t * topk, 4 * size_t(topk));
      }
    MPI_Alltoall(send_rows.data(), 1, MPI_INT, recv_rows.data(), 1, MPI_INT, MPI_COMM_WORLD);
    alltoallv(send.data(), send_rows, recv.data(), recv_rows, row_bytes);
    // Fan out to expert-major order: rows per local expert, then one copy per entry.
    const int64_t num_recv = total(recv_rows);
    std::vector<int64_t> per_expert(le + 1, 0);
    const int64_t first_expert = static_cast<int64_t>(rank) * le;
    auto local_of = [&](const char* meta, int k) {
      int32_t e;
      std::memcpy(&e, meta + 8 + 4 * k, 4);
      return e >= first_expert && e < first_expert + le ? e - first_expert : -1;
    };
    for (int64_t i = 0; i < num_recv; ++i) {
      const char* meta = recv.data() + i * row_bytes + hidden_bytes;
      for (int k = 0; k < topk; ++k)
        if (const int64_t j = local_of(meta, k); j >= 0) ++per_expert[j + 1];
    }
    for (int j = 0; j < le; ++j) per_expert[j + 1] += per_expert[j];
    expert_major.resize(static_cast<size_t>(std::max<int64_t>(per_expert[le], 1) * hidden_bytes));
    for (int64_t i = 0; i < num_recv; ++i) {
      const char* row = recv.data() + i * row_bytes;
      for (int k = 0; k < topk; ++k)
        if (const int64_t j = local_of(row + hidden_bytes, k); j >= 0)
          std::memcpy(expert_major.data() + per_expert[j]++ * hidden_bytes, row, hidden_bytes);
    }
  }

  void combine() {
    using moerl::kernels::bf16;
    const int topk = p.topk;
    const int64_t h = p.hidden, num_recv = total(recv_rows);
    const int64_t first_expert = static_cast<int64_t>(rank) * num_local;
    std::vector<float> acc(static_cast<size_t>(h));
    // Partial per received row: its local experts' weighted sum (identity experts).
    for (int64_t i = 0; i < num_recv; ++i) {
      const char* row = recv.data() + i * row_bytes;
      const char* meta = row + hidden_bytes;
      float w = 0;
      for (int k = 0; k < topk; ++k) {
        int32_t e;
        float wk;
        std::memcpy(&e, meta + 8 + 4 * k, 4);
        std::memcpy(&wk, meta + 8 + 4 * topk + 4 * k, 4);
        if (e >= first_expert && e < first_expert + num_local) w += wk;
      }
      const auto* x = reinterpret_cast<const bf16*>(row);
      auto* out = reinterpret_cast<bf16*>(partial_send.data() + i * hidden_bytes);
      for (int64_t c = 0; c < h; ++c)
        out[c] = moerl::kernels::float_to_bf16(moerl::kernels::bf16_to_float(x[c]) * w);
    }
    alltoallv(partial_send.data(), recv_rows, partial_recv.data(), send_rows, hidden_bytes);
    std::vector<int64_t> first(num_ranks, 0);
    for (int d = 1; d < num_ranks; ++d) first[d] = first[d - 1] + send_rows[d - 1];
    for (int64_t t = 0; t < in.num_tokens; ++t) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int d = 0; d < num_ranks; ++d) {
        const int64_t pos = dest_pos[t * num_ranks + d];
        if (pos < 0) continue;
        const auto* part =
            reinterpret_cast<const bf16*>(partial_recv.data() + (first[d] + pos) * hidden_bytes);
        for (int64_t c = 0; c < h; ++c) acc[c] += moerl::kernels::bf16_to_float(part[c]);
      }
      auto* out = reinterpret_cast<bf16*>(y.data() + t * hidden_bytes);
      for (int64_t c = 0; c < h; ++c) out[c] = moerl::kernels::float_to_bf16(acc[c]);
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, num_ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &num_ranks);
  peer_args a;
  if (!parse(argc, argv, a)) {
    if (rank == 0)
      std::fprintf(stderr,
                   "moerl-ep-mpi-peer: usage: --tokens N --hidden H --experts E --topk K "
                   "--iterations I --warmup W --routing R --seed S --out PATH\n");
    MPI_Finalize();
    return 2;
  }
  workload_params p;
  p.num_ranks = num_ranks;
  p.num_experts = a.experts;
  p.hidden = a.hidden;
  p.topk = a.topk;
  p.dtype = ep_dtype::bf16;
  p.tokens_per_rank = a.tokens_per_rank;
  p.routing = a.routing;
  p.seed = a.seed;
  const rank_inputs in = make_rank_inputs(p, rank);
  exchange ex(p, in, rank, num_ranks);
  std::vector<double> mine;  // per timed iteration: dispatch, combine, alltoallv share
  for (int it = 0; it < a.warmup + a.iterations; ++it) {
    ex.alltoallv_us = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = clk::now();
    ex.dispatch();
    const double d_us = us_since(t0);
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t1 = clk::now();
    ex.combine();
    const double c_us = us_since(t1);
    if (it >= a.warmup) mine.insert(mine.end(), {d_us, c_us, ex.alltoallv_us});
  }
  std::vector<double> all(mine.size() * num_ranks);
  MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(),
             static_cast<int>(mine.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  int rc = 0;
  if (rank == 0) {
    std::vector<double> d(a.iterations, 0), c(a.iterations, 0), v(a.iterations, 0);
    for (int r = 0; r < num_ranks; ++r)
      for (int i = 0; i < a.iterations; ++i) {
        const double* s = all.data() + r * mine.size() + 3 * i;
        d[i] = std::max(d[i], s[0]);
        c[i] = std::max(c[i], s[1]);
        v[i] = std::max(v[i], s[2]);
      }
    int major = 0, minor = 0;
    MPI_Get_version(&major, &minor);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    nlohmann::json j = {{"dispatch_us", d},
                        {"combine_us", c},
                        {"alltoallv_us", v},
                        {"mpi_version", std::to_string(major) + "." + std::to_string(minor)},
                        {"mpi_library", std::string(lib, strnlen(lib, sizeof(lib)))}};
    std::ofstream f(a.out);
    f << j.dump();
    rc = f ? 0 : 3;
  }
  MPI_Finalize();
  return rc;
}
