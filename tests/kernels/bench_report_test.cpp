// `moerl bench kernels` produces its documented report (per primitive: shapes, runs, p50/p99,
// GFLOP/s or GB/s, and the sgemm reference). A smoke run on shrunken
// shapes: the structure and the bookkeeping are checked, never the speed.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "bench/kernels/kernels_bench.h"

using moerl::bench::kernels_bench_options;

TEST(kernels_bench, a_quick_run_reports_every_primitive_with_rates_and_provenance) {
  kernels_bench_options opt;
  opt.quick = true;
  opt.runs = 2;
  opt.warmup = 0;
  opt.gemm_runs = 1;
  opt.threads = 2;
  const auto r = moerl::bench::run_kernels_bench(opt);
  ASSERT_TRUE(r.contains("memcpy_gbps"));
  ASSERT_TRUE(r.contains("sgemm_gflops"));
  EXPECT_GT(r["memcpy_gbps"].get<double>(), 0.0);
  EXPECT_GT(r["sgemm_gflops"].get<double>(), 0.0);
  ASSERT_TRUE(r.contains("provenance"));
  EXPECT_TRUE(r["provenance"].contains("blas"));
  std::set<std::string> names;
  for (const auto& e : r["results"]) {
    for (const char* key : {"name", "shape", "p50_us", "p99_us", "bytes", "gbps", "gflops"})
      ASSERT_TRUE(e.contains(key)) << key << " missing in " << e.dump();
    EXPECT_LE(e["p50_us"].get<double>(), e["p99_us"].get<double>()) << e["name"];
    const std::string name = e["name"].get<std::string>();
    const bool prefill_gemm = name.find("prefill") != std::string::npos &&
                              (name.rfind("expert_ffn", 0) == 0 || name.rfind("sgemm", 0) == 0);
    EXPECT_EQ(e["runs"].get<int>(), prefill_gemm ? opt.gemm_runs : opt.runs) << name;
    names.insert(name);
  }
  for (const char* want :
       {"route_forward.prefill", "route_backward.decode", "dispatch_layout.prefill",
        "permute_forward.fp32.prefill", "permute_backward.fp32.prefill",
        "combine_forward.fp32.prefill", "combine_backward.fp32.decode",
        "combine_forward.bf16.prefill", "fp8_quantize.prefill", "expert_ffn_forward.fp32.prefill",
        "sgemm_equal_flops.prefill", "expert_ffn_backward.fp32.prefill",
        "sgemm_equal_flops_split.prefill", "load_balance_loss.decode"})
    EXPECT_TRUE(names.count(want)) << want;
  for (const char* t :
       {"permute_forward_vs_memcpy", "combine_forward_vs_memcpy", "expert_ffn_vs_sgemm"})
    EXPECT_TRUE(r["targets"].contains(t)) << t;
  // The FFN and its references are timed in turns: one paired ratio per timed round.
  ASSERT_TRUE(r["ratios"].contains("expert_ffn_vs_sgemm_per_run.prefill"));
  EXPECT_EQ(r["ratios"]["expert_ffn_vs_sgemm_per_run.prefill"].size(),
            static_cast<size_t>(opt.gemm_runs));
  EXPECT_EQ(r["ratios"]["expert_ffn_vs_sgemm_per_run.decode"].size(),
            static_cast<size_t>(opt.runs));
  EXPECT_TRUE(r["ratios"].contains("expert_ffn_backward_vs_sgemm.prefill"));
}

TEST(kernels_bench, asking_for_cuda_without_a_gpu_is_a_clear_error) {
  kernels_bench_options opt;
  opt.quick = true;
  opt.cuda = true;
  try {
    moerl::bench::run_kernels_bench(opt);
    GTEST_SKIP() << "a GPU is visible here; the error path is not reachable";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("--cuda"), std::string::npos) << e.what();
  }
}
