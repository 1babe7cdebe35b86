#include "fabric/ep_workload.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <tuple>

#include "kernels/dtypes.h"

namespace moerl::fabric {
namespace {

float load(const workload_params& p, const char* base, int64_t i) {
  if (p.dtype == ep_dtype::fp32) {
    float f;
    std::memcpy(&f, base + i * 4, 4);
    return f;
  }
  kernels::bf16 b;
  std::memcpy(&b.bits, base + i * 2, 2);
  return kernels::bf16_to_float(b);
}

void store(const workload_params& p, char* base, int64_t i, float v) {
  if (p.dtype == ep_dtype::fp32) {
    std::memcpy(base + i * 4, &v, 4);
    return;
  }
  const kernels::bf16 b = kernels::float_to_bf16(v);
  std::memcpy(base + i * 2, &b.bits, 2);
}

// Round through the storage type, as a value written to an expert-major row would be.
float round_dtype(const workload_params& p, float v) {
  return p.dtype == ep_dtype::fp32 ? v : kernels::bf16_to_float(kernels::float_to_bf16(v));
}

float expert_scale(int64_t e) { return 1.0f + static_cast<float>(e % 7) / 8.0f; }

int64_t tokens_of(const workload_params& p, int rank) {
  if (rank == p.zero_tokens_rank) return 0;
  if (!p.vary_tokens) return p.tokens_per_rank;
  return p.tokens_per_rank - (static_cast<int64_t>(rank) * 37) % (p.tokens_per_rank / 2 + 1);
}

}  // namespace

rank_inputs make_rank_inputs(const workload_params& p, int rank) {
  rank_inputs in;
  in.num_tokens = tokens_of(p, rank);
  const int64_t T = in.num_tokens, H = p.hidden;
  const size_t elt = ep_dtype_size(p.dtype);
  in.x.assign(static_cast<size_t>(T * H) * elt, 0);
  in.topk_idx.assign(static_cast<size_t>(T * p.topk), -1);
  in.topk_weights.assign(static_cast<size_t>(T * p.topk), 0.0f);
  std::mt19937_64 rng(p.seed * 1000003u + static_cast<uint64_t>(rank));
  std::uniform_int_distribution<int> small(-64, 64);
  for (int64_t t = 0; t < T; ++t) {
    char* row = in.x.data() + t * H * elt;
    for (int64_t h = 0; h < H; ++h) {
      // Multiples of 1/64 in [-1, 1]: exact in bf16. The first three carry attribution.
      float v = static_cast<float>(small(rng)) / 64.0f;
      if (h == 0) v = static_cast<float>(rank);
      if (h == 1) v = static_cast<float>(t % 256);
      if (h == 2) v = static_cast<float>(t / 256);
      store(p, row, h, v);
    }
  }
  // Expert popularity: uniform, or Zipf over a seeded permutation of the experts (so the
  // hot experts are spread over ranks the same way on every rank).
  std::vector<double> weight(p.num_experts, 1.0);
  if (p.routing == "zipf") {
    std::vector<int> perm(p.num_experts);
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937_64 prng(p.seed);
    std::shuffle(perm.begin(), perm.end(), prng);
    for (int i = 0; i < p.num_experts; ++i) weight[perm[i]] = 1.0 / std::pow(i + 1.0, p.zipf_s);
  }
  std::discrete_distribution<int> pick(weight.begin(), weight.end());
  std::uniform_real_distribution<float> wdist(0.1f, 1.0f);
  std::uniform_real_distribution<double> mask(0.0, 1.0);
  const int le = p.num_experts / p.num_ranks;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int64_t> chosen;
    if (p.routing == "one_rank") {
      const int d = static_cast<int>(rng() % p.num_ranks);
      std::vector<int64_t> local(le);
      std::iota(local.begin(), local.end(), static_cast<int64_t>(d) * le);
      std::shuffle(local.begin(), local.end(), rng);
      chosen.assign(local.begin(), local.begin() + std::min(le, p.topk));
    }
    for (int tries = 0; static_cast<int>(chosen.size()) < p.topk; ++tries) {
      const int64_t e =
          tries < 64 * p.topk ? pick(rng) : static_cast<int64_t>(rng() % p.num_experts);
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    for (int k = 0; k < p.topk; ++k) {
      in.topk_idx[t * p.topk + k] = mask(rng) < p.mask_fraction ? -1 : chosen[k];
      in.topk_weights[t * p.topk + k] = wdist(rng);
    }
  }
  return in;
}

void apply_experts(const workload_params& p, int first_expert, const dispatch_output& d,
                   std::vector<char>& expert_out) {
  const int64_t H = p.hidden;
  const size_t elt = ep_dtype_size(p.dtype);
  expert_out.assign(static_cast<size_t>(std::max<int64_t>(d.num_recv_rows, 1) * H) * elt, 0);
  const char* in = static_cast<const char*>(d.recv_x);
  for (size_t j = 0; j + 1 < d.expert_offset.size(); ++j) {
    const float s = expert_scale(first_expert + static_cast<int64_t>(j));
    for (int64_t r = d.expert_offset[j]; r < d.expert_offset[j + 1]; ++r)
      for (int64_t h = 0; h < H; ++h)
        store(p, expert_out.data() + r * H * elt, h, load(p, in + r * H * elt, h) * s);
  }
}

status check_dispatch(const workload_params& p, const std::vector<rank_inputs>& all, int rank,
                      const dispatch_output& d) {
  const int le = p.num_experts / p.num_ranks;
  const int64_t first = static_cast<int64_t>(rank) * le, H = p.hidden;
  const size_t elt = ep_dtype_size(p.dtype), row = static_cast<size_t>(H) * elt;
  auto bad = [&](const std::string& m) {
    return error{errc::internal, "rank " + std::to_string(rank) + " dispatch check: " + m};
  };
  // Reference: per local expert, the sorted (source, token, k) entries naming it.
  using entry = std::tuple<int, int64_t, int>;
  std::vector<std::vector<entry>> want(le);
  for (int s = 0; s < p.num_ranks; ++s)
    for (int64_t t = 0; t < all[s].num_tokens; ++t)
      for (int k = 0; k < p.topk; ++k) {
        const int64_t e = all[s].topk_idx[t * p.topk + k];
        if (e >= first && e < first + le) want[e - first].emplace_back(s, t, k);
      }
  if (d.expert_offset.size() != static_cast<size_t>(le + 1))
    return bad("expert_offset has wrong size");
  for (int j = 0; j < le; ++j) {
    const int64_t got_n = d.expert_offset[j + 1] - d.expert_offset[j];
    if (got_n != static_cast<int64_t>(want[j].size()))
      return bad("expert " + std::to_string(first + j) + " received " + std::to_string(got_n) +
                 " rows, reference " + std::to_string(want[j].size()));
    std::vector<entry> got;
    for (int64_t r = d.expert_offset[j]; r < d.expert_offset[j + 1]; ++r) {
      const int s = d.src_rank[r];
      const int64_t t = d.src_token[r];
      if (s < 0 || s >= p.num_ranks || t < 0 || t >= all[s].num_tokens)
        return bad("row " + std::to_string(r) + " attributed to nonexistent (rank, token)");
      const char* payload = static_cast<const char*>(d.recv_x) + r * row;
      if (std::memcmp(payload, all[s].x.data() + t * row, row) != 0)
        return bad("row " + std::to_string(r) + " payload differs from rank " + std::to_string(s) +
                   " token " + std::to_string(t));
      if (H >= 3 && (load(p, payload, 0) != static_cast<float>(s) ||
                     load(p, payload, 1) + 256.0f * load(p, payload, 2) != static_cast<float>(t)))
        return bad("row " + std::to_string(r) + " payload encodes another (rank, token)");
      got.emplace_back(s, t, d.src_k[r]);
    }
    std::sort(got.begin(), got.end());
    if (got != want[j])
      return bad("expert " + std::to_string(first + j) + " received another set of rows");
  }
  return {};
}

std::vector<char> reference_combine(const workload_params& p, const std::vector<rank_inputs>& all,
                                    int rank, ep_mode mode) {
  const rank_inputs& in = all[rank];
  const int64_t H = p.hidden;
  const size_t elt = ep_dtype_size(p.dtype);
  const int le = p.num_experts / p.num_ranks;
  std::vector<char> y(static_cast<size_t>(std::max<int64_t>(in.num_tokens, 1) * H) * elt, 0);
  std::vector<float> acc(H), part(H);
  for (int64_t t = 0; t < in.num_tokens; ++t) {
    const char* x = in.x.data() + t * H * elt;
    std::fill(acc.begin(), acc.end(), 0.0f);
    if (mode == ep_mode::normal) {
      // Partial per rank (k ascending, rounded to dtype). Ranks of our node are summed
      // directly; another node's ranks are first summed (rank order, rounded) by that node's
      // gateway; the source adds the terms in the order of the rank each came from.
      const int R = p.ranks_per_node > 0 ? p.ranks_per_node : p.num_ranks;
      std::vector<std::vector<float>> partial(p.num_ranks);
      for (int d = 0; d < p.num_ranks; ++d) {
        bool any = false;
        std::vector<float> pr(H, 0.0f);
        for (int k = 0; k < p.topk; ++k) {
          const int64_t e = in.topk_idx[t * p.topk + k];
          if (e < 0 || e / le != d) continue;
          any = true;
          const float w = in.topk_weights[t * p.topk + k];
          for (int64_t h = 0; h < H; ++h)
            pr[h] += w * round_dtype(p, load(p, x, h) * expert_scale(e));
        }
        if (!any) continue;
        for (int64_t h = 0; h < H; ++h) pr[h] = round_dtype(p, pr[h]);
        partial[d] = std::move(pr);
      }
      for (int dest = 0; dest < p.num_ranks; ++dest) {
        if (dest / R == rank / R) {
          if (partial[dest].empty()) continue;
          for (int64_t h = 0; h < H; ++h) acc[h] += 1.0f * partial[dest][h];
          continue;
        }
        if (dest % R != rank % R) continue;  // not our gateway on that node
        const int node = dest / R;
        bool any = false;
        std::fill(part.begin(), part.end(), 0.0f);
        for (int d = node * R; d < node * R + R; ++d) {
          if (partial[d].empty()) continue;
          any = true;
          for (int64_t h = 0; h < H; ++h) part[h] += 1.0f * partial[d][h];
        }
        if (!any) continue;
        for (int64_t h = 0; h < H; ++h) acc[h] += 1.0f * round_dtype(p, part[h]);
      }
    } else {
      for (int k = 0; k < p.topk; ++k) {
        const int64_t e = in.topk_idx[t * p.topk + k];
        if (e < 0) continue;
        const float w = in.topk_weights[t * p.topk + k];
        for (int64_t h = 0; h < H; ++h)
          acc[h] += w * round_dtype(p, load(p, x, h) * expert_scale(e));
      }
    }
    for (int64_t h = 0; h < H; ++h) store(p, y.data() + t * H * elt, h, acc[h]);
  }
  return y;
}

workload_bytes count_bytes(const workload_params& p, const std::vector<rank_inputs>& all) {
  workload_bytes b;
  const uint64_t row = static_cast<uint64_t>(p.hidden) * ep_dtype_size(p.dtype);
  const int le = p.num_experts / p.num_ranks;
  for (const rank_inputs& in : all)
    for (int64_t t = 0; t < in.num_tokens; ++t) {
      std::vector<bool> seen(p.num_ranks, false);
      for (int k = 0; k < p.topk; ++k) {
        const int64_t e = in.topk_idx[t * p.topk + k];
        if (e < 0) continue;
        b.selection += row;
        if (!seen[e / le]) {
          seen[e / le] = true;
          b.logical += row;
        }
      }
    }
  return b;
}

}  // namespace moerl::fabric
