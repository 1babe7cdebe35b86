// `moerl bench kernels --cuda`: the CUDA twins on the same shapes as the CPU runner, timed
// per run with CUDA events on one stream. Host C++ only (the kernels live in
// moerl_kernels_cuda), built when MOERL_HAVE_CUDA.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/kernels/bench_random.h"
#include "bench/kernels/cuda_bench.h"
#include "bench/kernels/timing.h"
#include "bench/support.h"
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/dtypes.h"
#include "kernels/load_stats.h"
#include "provenance/provenance.h"

namespace moerl::bench {

namespace kc = moerl::kernels::cuda;

namespace {

// The benchmark's own C-API check: a failure aborts the benchmark with the call named.
#define BENCH_CUDA_CHECK(call)                                                             \
  do {                                                                                     \
    const cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess)                                                                 \
      throw std::runtime_error(std::string(#call) + " failed: " + cudaGetErrorString(e_) + \
                               " at " + __FILE__ + ":" + std::to_string(__LINE__));        \
  } while (0)
#define BENCH_CUBLAS_CHECK(call)                                                              \
  do {                                                                                        \
    const cublasStatus_t s_ = (call);                                                         \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                          \
      throw std::runtime_error(std::string(#call) + " failed: " + cublasGetStatusString(s_) + \
                               " at " + __FILE__ + ":" + std::to_string(__LINE__));           \
  } while (0)

template <class T>
class dbuf {
 public:
  explicit dbuf(size_t n) : n_(n) {
    if (n_) BENCH_CUDA_CHECK(cudaMalloc(&p_, n_ * sizeof(T)));
    if (n_) BENCH_CUDA_CHECK(cudaMemset(p_, 0, n_ * sizeof(T)));
  }
  dbuf(const std::vector<T>& h) : dbuf(h.size()) {
    if (n_) BENCH_CUDA_CHECK(cudaMemcpy(p_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~dbuf() {
    if (p_) cudaFree(p_);
  }
  dbuf(const dbuf&) = delete;
  dbuf& operator=(const dbuf&) = delete;
  T* get() const { return p_; }
  std::vector<T> host() const {
    std::vector<T> h(n_);
    if (n_) BENCH_CUDA_CHECK(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

std::vector<float> host_random(size_t n, uint32_t seed, float scale) {
  return moerl::bench::random_floats(n, seed, scale);
}

// Device time of each run from events around it on the benchmark stream.
timing time_gpu(cudaStream_t stream, int warmup, int runs, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  BENCH_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaEvent_t a, b;
  BENCH_CUDA_CHECK(cudaEventCreate(&a));
  BENCH_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> us;
  for (int i = 0; i < runs; ++i) {
    BENCH_CUDA_CHECK(cudaEventRecord(a, stream));
    fn();
    BENCH_CUDA_CHECK(cudaEventRecord(b, stream));
    BENCH_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    us.push_back(ms * 1e3);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return summarize(std::move(us));
}

}  // namespace

nlohmann::json run_kernels_bench_cuda(const kernels_bench_options& opt,
                                      const bench_shapes& shapes) {
  if (!kc::device_available()) throw std::runtime_error("--cuda: no CUDA device is visible");
  cudaStream_t stream;
  BENCH_CUDA_CHECK(cudaStreamCreate(&stream));
  cublasHandle_t blas;
  BENCH_CUBLAS_CHECK(cublasCreate(&blas));
  BENCH_CUBLAS_CHECK(cublasSetStream(blas, stream));
  const int R = opt.runs, W = opt.warmup;
  nlohmann::json results = nlohmann::json::array(), targets, imbalance;

  const int64_t copy_bytes =
      shapes.prefill.num_tokens * shapes.prefill.topk * shapes.prefill.hidden * 4;
  double memcpy_gbps = 0, sgemm_gflops = 0;
  nlohmann::json sgemm_shape;
  {
    dbuf<char> src(copy_bytes), dst(copy_bytes);
    auto t = time_gpu(stream, W, R, [&] {
      BENCH_CUDA_CHECK(
          cudaMemcpyAsync(dst.get(), src.get(), copy_bytes, cudaMemcpyDeviceToDevice, stream));
    });
    memcpy_gbps = 2.0 * copy_bytes / (t.p50_us * 1e3);
    results.push_back(result_entry("memcpy", {{"bytes", copy_bytes}}, t, 2.0 * copy_bytes, 0));
  }

  for (const bench_shape* sh : {&shapes.prefill, &shapes.decode}) {
    const int64_t T = sh->num_tokens, H = sh->hidden;
    const int E = sh->num_experts, K = sh->topk;
    const nlohmann::json shape_json = sh->to_json();
    const std::string tag = "." + sh->name;
    const auto rp = sh->routing();

    dbuf<float> logits(host_random(T * E, 1, 1.0f)), bias(host_random(E, 2, 0.01f)), scores(T * E),
        w(T * K), gw(std::vector<float>(T * K, 0.1f)), gl(T * E), gscores(T * E), loss(1);
    dbuf<int64_t> idx(T * K), counts(E);
    auto t = time_gpu(stream, W, R, [&] {
      need(kc::route_forward(stream, rp, logits.get(), bias.get(), nullptr, T, scores.get(),
                             idx.get(), w.get()),
           "cuda::route_forward");
    });
    results.push_back(
        result_entry("route_forward" + tag, shape_json, t, 4.0 * T * E * 2 + 12.0 * T * K, 0));
    t = time_gpu(stream, W, R, [&] {
      need(kc::route_backward(stream, rp, scores.get(), idx.get(), gw.get(), nullptr, T, gl.get()),
           "cuda::route_backward");
    });
    results.push_back(
        result_entry("route_backward" + tag, shape_json, t, 4.0 * T * E * 2 + 12.0 * T * K, 0));
    t = time_gpu(stream, W, R, [&] {
      need(kc::load_balance_loss(stream, scores.get(), idx.get(), T, E, K, 0.001f, loss.get(),
                                 gscores.get()),
           "cuda::load_balance_loss");
    });
    results.push_back(
        result_entry("load_balance_loss" + tag, shape_json, t, 4.0 * T * E * 2 + 8.0 * T * K, 0));
    need(kc::count_tokens_per_expert(stream, idx.get(), T, K, E, counts.get()),
         "cuda::count_tokens_per_expert");
    BENCH_CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<int64_t> hcounts = counts.host();
    imbalance[sh->name] = kernels::load_imbalance(hcounts.data(), E);

    const int ranks = sh->layout_ranks;
    dbuf<int64_t> pe(E), pr(ranks), rank_slot(T * ranks), offset(E + 1), slot(T * K);
    dbuf<uint8_t> in_rank(T * ranks);
    kernels::dispatch_layout_out lo{pe.get(),        pr.get(),     in_rank.get(),
                                    rank_slot.get(), offset.get(), slot.get()};
    t = time_gpu(stream, W, R, [&] {
      need(kc::get_dispatch_layout(stream, idx.get(), {T, K, E, ranks, 1}, lo),
           "cuda::get_dispatch_layout");
    });
    results.push_back(
        result_entry("dispatch_layout" + tag, shape_json, t, 8.0 * T * K * 2 + 9.0 * T * ranks, 0));
    BENCH_CUDA_CHECK(cudaStreamSynchronize(stream));
    const int64_t rows = offset.host()[E];
    const double row_bytes = 4.0 * H;
    {
      dbuf<float> x(host_random(T * H, 3, 1.0f)), permuted(rows * H), grad_permuted(rows * H),
          out(T * H), gwt(T * K);
      t = time_gpu(stream, W, R, [&] {
        need(kc::permute_forward(stream, x.get(), slot.get(), T, K, H, rows, permuted.get()),
             "cuda::permute_forward");
      });
      auto perm =
          result_entry("permute_forward.fp32" + tag, shape_json, t, row_bytes * rows * 2, 0);
      results.push_back(perm);
      t = time_gpu(stream, W, R, [&] {
        need(kc::permute_backward(stream, permuted.get(), slot.get(), T, K, H, rows, x.get()),
             "cuda::permute_backward");
      });
      results.push_back(
          result_entry("permute_backward.fp32" + tag, shape_json, t, row_bytes * (rows + T), 0));
      t = time_gpu(stream, W, R, [&] {
        need(kc::combine_forward(stream, permuted.get(), slot.get(), w.get(), T, K, H, rows,
                                 out.get()),
             "cuda::combine_forward");
      });
      auto comb =
          result_entry("combine_forward.fp32" + tag, shape_json, t, row_bytes * (rows + T), 0);
      results.push_back(comb);
      t = time_gpu(stream, W, R, [&] {
        need(kc::combine_backward(stream, out.get(), permuted.get(), slot.get(), w.get(), T, K, H,
                                  rows, grad_permuted.get(), gwt.get()),
             "cuda::combine_backward");
      });
      results.push_back(result_entry("combine_backward.fp32" + tag, shape_json, t,
                                     row_bytes * (2 * rows + 2 * T), 0));
      if (sh->name == "prefill") {
        targets["permute_forward_vs_memcpy"] = perm["gbps"].get<double>() / memcpy_gbps;
        targets["combine_forward_vs_memcpy"] = comb["gbps"].get<double>() / memcpy_gbps;
      }
    }
    {
      dbuf<kernels::bf16> x(T * H), permuted(rows * H), out(T * H);
      t = time_gpu(stream, W, R, [&] {
        need(kc::permute_forward(stream, x.get(), slot.get(), T, K, H, rows, permuted.get()),
             "cuda::permute_forward");
      });
      results.push_back(
          result_entry("permute_forward.bf16" + tag, shape_json, t, row_bytes / 2 * rows * 2, 0));
      t = time_gpu(stream, W, R, [&] {
        need(kc::combine_forward(stream, permuted.get(), slot.get(), w.get(), T, K, H, rows,
                                 out.get()),
             "cuda::combine_forward");
      });
      results.push_back(
          result_entry("combine_forward.bf16" + tag, shape_json, t, row_bytes / 2 * (rows + T), 0));
    }
    {
      dbuf<float> x(host_random(T * H, 5, 1.0f)), s(T * kernels::fp8_num_blocks(H));
      dbuf<uint8_t> q(T * H);
      t = time_gpu(stream, W, R, [&] {
        need(kc::fp8_quantize(stream, x.get(), T, H, q.get(), s.get()), "cuda::fp8_quantize");
      });
      results.push_back(result_entry("fp8_quantize" + tag, shape_json, t, 5.0 * T * H, 0));
      t = time_gpu(stream, W, R, [&] {
        need(kc::fp8_dequantize(stream, q.get(), s.get(), T, H, x.get()), "cuda::fp8_dequantize");
      });
      results.push_back(result_entry("fp8_dequantize" + tag, shape_json, t, 5.0 * T * H, 0));
    }
    {
      const int local = E / sh->ffn_ranks;
      const int64_t F = sh->ffn_dim;
      std::vector<int64_t> local_offset(local + 1, 0);
      for (int e = 0; e < local; ++e) local_offset[e + 1] = local_offset[e] + hcounts[e];
      const int64_t m = local_offset[local];
      const double flops = 6.0 * m * H * F;
      dbuf<float> x(host_random(m * H, 6, 1.0f)), wgu(host_random(local * 2 * F * H, 7, 0.02f)),
          wd(host_random(local * H * F, 8, 0.02f)), h(m * 2 * F), a(m * F), y(m * H), gx(m * H),
          gwgu(local * 2 * F * H), gwd(local * H * F), bmat(H * 3 * F), cmat(m * 3 * F);
      nlohmann::json ffn_shape = shape_json;
      ffn_shape["ep_ranks"] = sh->ffn_ranks;
      ffn_shape["local_experts"] = local;
      ffn_shape["rows"] = m;
      ffn_shape["ffn_dim"] = F;
      ffn_shape["rows_per_expert"] = std::vector<int64_t>(hcounts.begin(), hcounts.begin() + local);
      t = time_gpu(stream, W, R, [&] {
        need(kc::expert_ffn_forward(stream, {local, H, F}, local_offset.data(), x.get(), wgu.get(),
                                    wd.get(), h.get(), a.get(), y.get()),
             "cuda::expert_ffn_forward");
      });
      const double weight_bytes = 4.0 * local * 3 * F * H;
      auto ffn = result_entry("expert_ffn_forward.fp32" + tag, ffn_shape, t,
                              weight_bytes + 4.0 * m * (2 * H + 3 * F), flops);
      results.push_back(ffn);
      t = time_gpu(stream, W, R, [&] {
        need(kc::expert_ffn_backward(stream, {local, H, F}, local_offset.data(), x.get(), wgu.get(),
                                     wd.get(), h.get(), a.get(), y.get(), gx.get(), gwgu.get(),
                                     gwd.get()),
             "cuda::expert_ffn_backward");
      });
      results.push_back(result_entry("expert_ffn_backward.fp32" + tag, ffn_shape, t,
                                     3 * weight_bytes, 2 * flops));
      const float one = 1.0f, zero = 0.0f;
      // Row-major [m, H] x [H, 3F] as column-major [3F, H] x [H, m].
      t = time_gpu(stream, W, R, [&] {
        BENCH_CUBLAS_CHECK(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(3 * F),
                                       static_cast<int>(m), static_cast<int>(H), &one, bmat.get(),
                                       static_cast<int>(3 * F), x.get(), static_cast<int>(H), &zero,
                                       cmat.get(), static_cast<int>(3 * F)));
      });
      nlohmann::json gemm_shape = {{"m", m}, {"n", 3 * F}, {"k", H}};
      auto gemm = result_entry("sgemm_equal_flops" + tag, gemm_shape, t,
                               4.0 * (m * H + H * 3 * F + m * 3 * F), flops);
      results.push_back(gemm);
      if (sh->name == "prefill") {
        sgemm_gflops = gemm["gflops"].get<double>();
        sgemm_shape = gemm_shape;
        targets["expert_ffn_vs_sgemm"] = ffn["gflops"].get<double>() / sgemm_gflops;
      }
    }
  }
  cublasDestroy(blas);
  cudaStreamDestroy(stream);

  nlohmann::json report;
  report["benchmark"] = "kernels";
  report["device"] = "cuda";
  report["memcpy_gbps"] = memcpy_gbps;
  report["sgemm_gflops"] = sgemm_gflops;
  report["sgemm_shape"] = sgemm_shape;
  report["targets"] = targets;
  report["load_imbalance"] = imbalance;
  report["targets_goal"] = {{"permute_forward_vs_memcpy", 0.6},
                            {"combine_forward_vs_memcpy", 0.6},
                            {"expert_ffn_vs_sgemm", 0.8}};
  report["config"] = {
      {"runs", opt.runs},
      {"warmup", opt.warmup},
      {"quick", opt.quick},
      {"timer", "CUDA events around each run on one stream"},
      {"bytes_model", "bytes read plus bytes written of row data per call, at p50"}};
  report["results"] = results;
  report["provenance"] = collect_provenance();
  return report;
}

}  // namespace moerl::bench
