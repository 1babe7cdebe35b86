#include "bench/kernels/kernels_bench.h"

#include "bench/kernels/bench_random.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/kernels/cuda_bench.h"
#include "bench/kernels/sgemm_reference.h"
#include "bench/kernels/timing.h"
#include "bench/support.h"
#include "kernels/combine.h"
#include "kernels/dispatch_layout.h"
#include "kernels/dtypes.h"
#include "kernels/expert_ffn.h"
#include "kernels/load_stats.h"
#include "kernels/permute.h"
#include "kernels/routing.h"
#include "provenance/provenance.h"

namespace moerl::bench {

namespace k = moerl::kernels;

nlohmann::json run_kernels_bench(const kernels_bench_options& opt) {
  const bench_shapes shapes = bench_shapes::make(opt.quick);
  if (opt.cuda) return run_kernels_bench_cuda(opt, shapes);

  k::thread_pool pool(opt.threads);
  nlohmann::json results = nlohmann::json::array();
  const int R = opt.runs, W = opt.warmup;

  // ---- the same run's references: memcpy bandwidth and one sgemm -------------------------
  const int64_t copy_bytes =
      shapes.prefill.num_tokens * shapes.prefill.topk * shapes.prefill.hidden * 4;
  std::vector<char> src(copy_bytes, 1), dst(copy_bytes, 0);
  // Two ways to copy the same bytes, split across the pool like the kernels: one memcpy per
  // thread over its whole share (glibc may pick non-temporal stores for that size), and one
  // memcpy per hidden-sized row (the granularity permute copies at). The faster one is the
  // reference, so a slow memcpy strategy cannot flatter the kernels' ratios.
  const int64_t row_bytes_copy = shapes.prefill.hidden * 4;
  const auto memcpy_t = time_runs(W, R, [&] {
    pool.parallel_for(
        copy_bytes, [&](int64_t b, int64_t e) { std::memcpy(&dst[b], &src[b], e - b); }, 1 << 20);
  });
  const auto memcpy_rows_t = time_runs(W, R, [&] {
    pool.parallel_for(
        copy_bytes / row_bytes_copy,
        [&](int64_t b, int64_t e) {
          for (int64_t r = b; r < e; ++r)
            std::memcpy(&dst[r * row_bytes_copy], &src[r * row_bytes_copy], row_bytes_copy);
        },
        16);
  });
  const double memcpy_gbps =
      2.0 * copy_bytes / (std::min(memcpy_t.p50_us, memcpy_rows_t.p50_us) * 1e3);
  results.push_back(result_entry("memcpy", {{"bytes", copy_bytes}}, memcpy_t, 2.0 * copy_bytes, 0));
  results.push_back(result_entry("memcpy_rows",
                                 {{"bytes", copy_bytes}, {"row_bytes", row_bytes_copy}},
                                 memcpy_rows_t, 2.0 * copy_bytes, 0));
  src.clear();
  src.shrink_to_fit();
  dst.clear();
  dst.shrink_to_fit();

  nlohmann::json targets, imbalance, ratios;
  double sgemm_gflops = 0;
  nlohmann::json sgemm_shape;

  for (const bench_shape* sh : {&shapes.prefill, &shapes.decode}) {
    const int64_t T = sh->num_tokens, H = sh->hidden;
    const int E = sh->num_experts, K = sh->topk;
    const nlohmann::json shape_json = sh->to_json();
    const std::string tag = "." + sh->name;

    // ---- routing ---------------------------------------------------------------------
    k::routing_params rp = sh->routing();
    auto logits = random_floats(T * E, 1, 1.0f);
    auto bias = random_floats(E, 2, 0.01f);
    std::vector<float> scores(T * E), w(T * K), gw(T * K, 0.1f), gl(T * E);
    std::vector<int64_t> idx(T * K);
    auto t = time_runs(W, R, [&] {
      need(k::route_forward(pool, rp, logits.data(), bias.data(), nullptr, T, scores.data(),
                            idx.data(), w.data()),
           "route_forward");
    });
    results.push_back(
        result_entry("route_forward" + tag, shape_json, t, 4.0 * T * E * 2 + 12.0 * T * K, 0));
    t = time_runs(W, R, [&] {
      need(k::route_backward(pool, rp, scores.data(), idx.data(), gw.data(), nullptr, T, gl.data()),
           "route_backward");
    });
    results.push_back(
        result_entry("route_backward" + tag, shape_json, t, 4.0 * T * E * 2 + 12.0 * T * K, 0));

    std::vector<int64_t> counts(E);
    float loss = 0;
    std::vector<float> gscores(T * E);
    t = time_runs(W, R, [&] {
      need(k::load_balance_loss(pool, scores.data(), idx.data(), T, E, K, 0.001f, &loss,
                                gscores.data()),
           "load_balance_loss");
    });
    results.push_back(
        result_entry("load_balance_loss" + tag, shape_json, t, 4.0 * T * E * 2 + 8.0 * T * K, 0));
    need(k::count_tokens_per_expert(pool, idx.data(), T, K, E, counts.data()),
         "count_tokens_per_expert");

    // ---- dispatch layout ---------------------------------------------------------------
    const int ranks = sh->layout_ranks;
    std::vector<int64_t> per_expert(E), per_rank(ranks), rank_slot(T * ranks), offset(E + 1),
        slot(T * K);
    std::vector<uint8_t> in_rank(T * ranks);
    k::dispatch_layout_out lo{per_expert.data(), per_rank.data(), in_rank.data(),
                              rank_slot.data(),  offset.data(),   slot.data()};
    t = time_runs(W, R, [&] {
      need(k::get_dispatch_layout(pool, idx.data(), {T, K, E, ranks, 1}, lo),
           "get_dispatch_layout");
    });
    results.push_back(
        result_entry("dispatch_layout" + tag, shape_json, t, 8.0 * T * K * 2 + 9.0 * T * ranks, 0));
    const int64_t rows = offset[E];
    const double row_bytes = 4.0 * H;

    // ---- permute / combine, fp32 ---------------------------------------------------------
    {
      auto x = random_floats(T * H, 3, 1.0f);
      std::vector<float> permuted(rows * H), grad_permuted(rows * H), out(T * H), gwt(T * K);
      t = time_runs(W, R, [&] {
        need(k::permute_forward(pool, x.data(), slot.data(), T, K, H, rows, permuted.data()),
             "permute_forward");
      });
      auto perm =
          result_entry("permute_forward.fp32" + tag, shape_json, t, row_bytes * rows * 2, 0);
      results.push_back(perm);
      t = time_runs(W, R, [&] {
        need(k::permute_backward(pool, permuted.data(), slot.data(), T, K, H, rows, x.data()),
             "permute_backward");
      });
      results.push_back(
          result_entry("permute_backward.fp32" + tag, shape_json, t, row_bytes * (rows + T), 0));
      t = time_runs(W, R, [&] {
        need(k::combine_forward(pool, permuted.data(), slot.data(), w.data(), T, K, H, rows,
                                out.data()),
             "combine_forward");
      });
      auto comb =
          result_entry("combine_forward.fp32" + tag, shape_json, t, row_bytes * (rows + T), 0);
      results.push_back(comb);
      t = time_runs(W, R, [&] {
        need(k::combine_backward(pool, out.data(), permuted.data(), slot.data(), w.data(), T, K, H,
                                 rows, grad_permuted.data(), gwt.data()),
             "combine_backward");
      });
      // grad_expert_out written, expert_out read, grad_out read once per pass.
      results.push_back(result_entry("combine_backward.fp32" + tag, shape_json, t,
                                     row_bytes * (2 * rows + 2 * T), 0));
      t = time_runs(W, R, [&] {
        need(k::unpermute_forward(pool, permuted.data(), slot.data(), T, K, H, rows,
                                  grad_permuted.data()),
             "unpermute_forward");
      });
      results.push_back(
          result_entry("unpermute_forward.fp32" + tag, shape_json, t, row_bytes * rows * 2, 0));
      if (sh->name == "prefill") {
        targets["permute_forward_vs_memcpy"] = perm["gbps"].get<double>() / memcpy_gbps;
        targets["combine_forward_vs_memcpy"] = comb["gbps"].get<double>() / memcpy_gbps;
      }
    }
    // ---- permute / combine, bf16 storage ---------------------------------------------------
    {
      auto xf = random_floats(T * H, 4, 1.0f);
      std::vector<k::bf16> x(T * H), permuted(rows * H), out(T * H);
      need(k::bf16_from_float(pool, xf.data(), T * H, x.data()), "bf16_from_float");
      xf.clear();
      xf.shrink_to_fit();
      t = time_runs(W, R, [&] {
        need(k::permute_forward(pool, x.data(), slot.data(), T, K, H, rows, permuted.data()),
             "permute_forward");
      });
      results.push_back(
          result_entry("permute_forward.bf16" + tag, shape_json, t, row_bytes / 2 * rows * 2, 0));
      t = time_runs(W, R, [&] {
        need(k::combine_forward(pool, permuted.data(), slot.data(), w.data(), T, K, H, rows,
                                out.data()),
             "combine_forward");
      });
      results.push_back(
          result_entry("combine_forward.bf16" + tag, shape_json, t, row_bytes / 2 * (rows + T), 0));
    }
    // ---- FP8 quantise / dequantise of the dispatched token rows -----------------------------
    {
      auto x = random_floats(T * H, 5, 1.0f);
      std::vector<uint8_t> q(T * H);
      std::vector<float> s(T * k::fp8_num_blocks(H));
      t = time_runs(W, R, [&] {
        need(k::fp8_quantize(pool, x.data(), T, H, q.data(), s.data()), "fp8_quantize");
      });
      results.push_back(result_entry("fp8_quantize" + tag, shape_json, t, 5.0 * T * H, 0));
      t = time_runs(W, R, [&] {
        need(k::fp8_dequantize(pool, q.data(), s.data(), T, H, x.data()), "fp8_dequantize");
      });
      results.push_back(result_entry("fp8_dequantize" + tag, shape_json, t, 5.0 * T * H, 0));
    }

    // ---- grouped expert FFN over one EP rank's local experts --------------------------------
    {
      const int local = E / sh->ffn_ranks;
      const int64_t F = sh->ffn_dim;
      std::vector<int64_t> local_offset(local + 1, 0);
      for (int e = 0; e < local; ++e) local_offset[e + 1] = local_offset[e] + counts[e];
      const int64_t m = local_offset[local];
      const double flops = 6.0 * m * H * F;
      auto x = random_floats(m * H, 6, 1.0f);
      auto wgu = random_floats(local * 2 * F * H, 7, 0.02f);
      auto wd = random_floats(local * H * F, 8, 0.02f);
      std::vector<float> h(m * 2 * F), a(m * F), y(m * H), gx(m * H), gwgu(wgu.size()),
          gwd(wd.size());
      const bool big = sh->name == "prefill";
      const int runs = big ? opt.gemm_runs : R;
      const int warm = big ? 1 : W;
      nlohmann::json ffn_shape = shape_json;
      ffn_shape["ep_ranks"] = sh->ffn_ranks;
      ffn_shape["local_experts"] = local;
      ffn_shape["rows"] = m;
      ffn_shape["ffn_dim"] = F;
      ffn_shape["rows_per_expert"] = std::vector<int64_t>(counts.begin(), counts.begin() + local);
      // The reference: one sgemm with the same FLOPs, [m, H] x [H, 3F], on the same pool's
      // cores both ways (BLAS's threads; the pool's threads with one BLAS thread each); the
      // faster is the reference, so neither threading choice can flatter the FFN.
      std::vector<float> bmat(H * 3 * F), cmat(m * 3 * F);
      std::copy(wgu.begin(), wgu.begin() + std::min<int64_t>(wgu.size(), bmat.size()),
                bmat.begin());
      const sgemm_problem ref{m, 3 * F, H, x.data(), bmat.data(), cmat.data()};
      // Forward, backward and both references in turns, so they see the same background load.
      const auto ts = time_interleaved(
          warm, runs,
          {[&] {
             need(k::expert_ffn_forward(pool, {local, H, F}, local_offset.data(), x.data(),
                                        wgu.data(), wd.data(), h.data(), a.data(), y.data()),
                  "expert_ffn_forward");
           },
           [&] {
             need(k::expert_ffn_backward(pool, {local, H, F}, local_offset.data(), x.data(),
                                         wgu.data(), wd.data(), h.data(), a.data(), y.data(),
                                         gx.data(), gwgu.data(), gwd.data()),
                  "expert_ffn_backward");
           },
           [&] { sgemm_blas_threads(ref); }, [&] { sgemm_pool_split(pool, ref); }});
      const double weight_bytes = 4.0 * local * 3 * F * H;
      auto ffn = result_entry("expert_ffn_forward.fp32" + tag, ffn_shape, ts[0],
                              weight_bytes + 4.0 * m * (2 * H + 3 * F), flops);
      auto ffn_back = result_entry("expert_ffn_backward.fp32" + tag, ffn_shape, ts[1],
                                   3 * weight_bytes, 2 * flops);
      nlohmann::json gemm_shape = {{"m", m}, {"n", 3 * F}, {"k", H}};
      const double gemm_bytes = 4.0 * (m * H + H * 3 * F + m * 3 * F);
      auto gemm = result_entry("sgemm_equal_flops" + tag, gemm_shape, ts[2], gemm_bytes, flops);
      auto gemm_split =
          result_entry("sgemm_equal_flops_split" + tag, gemm_shape, ts[3], gemm_bytes, flops);
      results.push_back(ffn);
      results.push_back(ffn_back);
      results.push_back(gemm);
      results.push_back(gemm_split);
      const double ref_gflops =
          std::max(gemm["gflops"].get<double>(), gemm_split["gflops"].get<double>());
      // Per round: reference time (faster way) over FFN time, all four measured back to back.
      std::vector<double> per_run;
      for (size_t i = 0; i < ts[0].us.size(); ++i)
        per_run.push_back(std::min(ts[2].us[i], ts[3].us[i]) / ts[0].us[i]);
      ratios["expert_ffn_vs_sgemm_per_run" + tag] = per_run;
      ratios["expert_ffn_backward_vs_sgemm" + tag] = ffn_back["gflops"].get<double>() / ref_gflops;
      if (big) {
        sgemm_gflops = ref_gflops;
        sgemm_shape = gemm_shape;
        targets["expert_ffn_vs_sgemm"] = ffn["gflops"].get<double>() / sgemm_gflops;
      }
    }
    imbalance[sh->name] = k::load_imbalance(counts.data(), E);
  }

  nlohmann::json report;
  report["benchmark"] = "kernels";
  report["device"] = "cpu";
  report["memcpy_gbps"] = memcpy_gbps;
  report["sgemm_gflops"] = sgemm_gflops;
  report["sgemm_shape"] = sgemm_shape;
  report["targets"] = targets;
  report["load_imbalance"] = imbalance;  // max/mean tokens per expert of the routed batch
  report["ratios"] = ratios;             // informative FFN figures beside the targets
  report["targets_goal"] = {{"permute_forward_vs_memcpy", 0.6},
                            {"combine_forward_vs_memcpy", 0.6},
                            {"expert_ffn_vs_sgemm", 0.8}};
  report["config"] = {
      {"runs", opt.runs},
      {"warmup", opt.warmup},
      {"gemm_runs_prefill", opt.gemm_runs},
      {"threads", pool.num_threads()},
      {"quick", opt.quick},
      {"bytes_model", "bytes read plus bytes written of row data per call, at p50"},
      {"memcpy_reference", "faster p50 of memcpy (bulk per thread) and memcpy_rows (per row)"},
      {"note",
       "prefill-size FFN and its sgemm twin use gemm_runs timed runs (seconds each on "
       "a small CPU); every other entry uses runs"},
      {"ffn_reference",
       "FFN forward, backward, sgemm (BLAS threads) and sgemm_split (pool threads, "
       "one BLAS thread each) timed in turns; sgemm_gflops is the faster sgemm"}};
  report["results"] = results;
  report["provenance"] = collect_provenance();
  return report;
}

}  // namespace moerl::bench
