#include "job/internal/ep_device_rank.h"

#include "fabric/collectives.h"

#ifdef MOERL_HAVE_CUDA
#include <cuda_runtime.h>

#include <cmath>

#include "common/status_try.h"
#include "job/device.h"
#include "policy/cuda/adam_cuda.h"
#include "policy/cuda/device_expert_exchange.h"
#include "policy/cuda/model_cuda.h"
#include "policy/cuda/trainer_cuda.h"
#endif

namespace moerl::job {

#ifdef MOERL_HAVE_CUDA

namespace pc = policy::cuda;

namespace {

// THE seam (ep_device_rank.h): how a rank's device policy reaches the other ranks' experts.
// Today: the host expert plane with explicit staging. The expert plane on device memory
// (fabric/, issue 29) returns its own device_expert_exchange here instead.
std::unique_ptr<pc::device_expert_exchange> make_rank_device_exchange(
    policy::expert_exchange& host_exchange) {
  return pc::make_host_staged_exchange(host_exchange);
}

}  // namespace

struct ep_device_rank::impl {
  std::unique_ptr<pc::moe_policy> policy;
  std::unique_ptr<pc::adam> opt;
  pc::device_buffer<float> grads, reduce, recv;
  pc::device_buffer<char> bytes;
};

ep_device_rank::ep_device_rank(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
ep_device_rank::~ep_device_rank() = default;

result<std::unique_ptr<ep_device_rank>> ep_device_rank::create(
    const policy::model_config& model, policy::expert_exchange& host_exchange, int global_rank) {
  CUDA_CHECK(cudaSetDevice(device_of_rank(global_rank, probe_device_facts())));
  auto p = std::make_unique<impl>();
  if (host_exchange.num_ranks() == 1) {
    ASSIGN_OR_RETURN(p->policy, pc::moe_policy::create(model));
  } else {
    ASSIGN_OR_RETURN(p->policy, pc::moe_policy::create(model, host_exchange,
                                                       make_rank_device_exchange(host_exchange)));
  }
  return std::unique_ptr<ep_device_rank>(new ep_device_rank(std::move(p)));
}

result<std::vector<float>> ep_device_rank::params_host() const {
  return impl_->policy->params_host();
}

status ep_device_rank::set_params(const std::vector<float>& params) {
  return impl_->policy->params_from_host(params);
}

result<policy::generation> ep_device_rank::generate(
    const std::vector<std::vector<policy::token_id>>& prompts, int max_new, float temperature,
    std::mt19937_64& rng) {
  return impl_->policy->generate(prompts, max_new, temperature, rng);
}

status ep_device_rank::make_optimizer(const policy::adam_config& adam) {
  ASSIGN_OR_RETURN(impl_->opt, pc::adam::create(adam, impl_->policy->num_params()));
  return ok_status();
}

result<std::pair<policy::update_stats, double>> ep_device_rank::train_epoch(
    const std::vector<policy::sample>& mine, const std::vector<double>& advantages,
    const policy::grpo_config& grpo, float temperature,
    const std::vector<std::pair<size_t, size_t>>& dense_ranges, size_t num_dense,
    fabric::collective_group& dense) {
  impl& m = *impl_;
  if (!m.opt) return error{errc::internal, "device trainer rank without an optimiser"};
  pc::moe_policy& p = *m.policy;
  cudaStream_t s = p.stream();
  ASSIGN_OR_RETURN(policy::update_stats u,
                   pc::grpo_gradient(p, mine, advantages, grpo, temperature, nullptr, &m.grads));
  // ep_trainer.cpp's CPU step on device buffers: one all-reduce of the dense gradients
  // followed by this rank's expert squared norm.
  STATUS_TRY(m.reduce.resize(num_dense + 1));
  float* g = m.grads.get();
  float* r = m.reduce.get();
  constexpr size_t fs = sizeof(float);
  size_t k = 0;
  for (const auto& [off, len] : dense_ranges) {
    if (len) CUDA_CHECK(cudaMemcpyAsync(r + k, g + off, len * fs, cudaMemcpyDeviceToDevice, s));
    k += len;
  }
  double expert_sq = 0;
  size_t next = 0;  // gaps between dense ranges are expert tensors
  auto add = [&](size_t a, size_t b) -> status {
    if (b <= a) return ok_status();
    ASSIGN_OR_RETURN(double q, m.opt->squared_norm(s, g + a, b - a));
    expert_sq += q;
    return ok_status();
  };
  for (const auto& [off, len] : dense_ranges) {
    STATUS_TRY(add(next, off));
    next = off + len;
  }
  STATUS_TRY(add(next, m.grads.size()));
  const float expert_sq_f = float(expert_sq);
  CUDA_CHECK(cudaMemcpyAsync(r + k, &expert_sq_f, fs, cudaMemcpyHostToDevice, s));
  // NCCL runs on its own stream: what this one queued lands first.
  CUDA_CHECK(cudaStreamSynchronize(s));
  if (auto st = dense.all_reduce_sum(r, num_dense + 1, fabric::coll_dtype::fp32,
                                     fabric::memory_kind::cuda);
      !st)
    return error{st.err().code, "dense gradient all-reduce (NCCL): " + st.err().message};
  k = 0;
  for (const auto& [off, len] : dense_ranges) {
    if (len) CUDA_CHECK(cudaMemcpyAsync(g + off, r + k, len * fs, cudaMemcpyDeviceToDevice, s));
    k += len;
  }
  ASSIGN_OR_RETURN(double dense_sq, m.opt->squared_norm(s, r, num_dense));
  float all_expert_sq = 0;
  CUDA_CHECK(cudaMemcpyAsync(&all_expert_sq, r + num_dense, fs, cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  // Identical on every rank (the same reduced floats), so every rank takes the same branch.
  const double norm = std::sqrt(dense_sq + double(all_expert_sq));
  if (!std::isfinite(norm))
    return error{errc::invalid_argument, "gradient is not finite; step skipped"};
  STATUS_TRY(m.opt->step_with_norm(s, p.params_device(), g, norm));
  return std::make_pair(u, norm);
}

result<std::string> ep_device_rank::adam_bytes() const {
  if (!impl_->opt) return error{errc::internal, "device trainer rank without an optimiser"};
  return impl_->opt->serialize(impl_->policy->stream());
}

status ep_device_rank::load_adam(const std::string& bytes) {
  if (!impl_->opt) return error{errc::internal, "device trainer rank without an optimiser"};
  return impl_->opt->load(impl_->policy->stream(), bytes);
}

status ep_device_rank::broadcast_bytes(fabric::collective_group& dense, std::string& bytes,
                                       int root) {
  cudaStream_t s = impl_->policy->stream();
  STATUS_TRY(impl_->bytes.resize(bytes.size()));
  const bool is_root = dense.rank() == root;
  if (is_root && !bytes.empty()) {
    CUDA_CHECK(
        cudaMemcpyAsync(impl_->bytes.get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
  }
  STATUS_TRY(dense.broadcast(impl_->bytes.get(), bytes.size(), root, fabric::memory_kind::cuda));
  if (!is_root && !bytes.empty()) {
    CUDA_CHECK(
        cudaMemcpyAsync(bytes.data(), impl_->bytes.get(), bytes.size(), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
  }
  return ok_status();
}

result<std::vector<float>> ep_device_rank::broadcast_share(fabric::collective_group& dense,
                                                           int root) {
  pc::moe_policy& p = *impl_->policy;
  cudaStream_t s = p.stream();
  const size_t n = p.num_params();
  if (dense.rank() == root) {
    CUDA_CHECK(cudaStreamSynchronize(s));  // the step's update has landed
    STATUS_TRY(
        dense.broadcast(p.params_device(), n * sizeof(float), root, fabric::memory_kind::cuda));
    return p.params_host();
  }
  STATUS_TRY(impl_->recv.resize(n));
  STATUS_TRY(
      dense.broadcast(impl_->recv.get(), n * sizeof(float), root, fabric::memory_kind::cuda));
  std::vector<float> out;
  STATUS_TRY(impl_->recv.download(&out, s));
  return out;
}

#else  // !MOERL_HAVE_CUDA: job/device.h refuses job.device=cuda first; this says why too.

struct ep_device_rank::impl {};

ep_device_rank::ep_device_rank(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
ep_device_rank::~ep_device_rank() = default;

namespace {
error no_cuda() {
  return error{errc::invalid_config,
               "job.device=cuda: this moerl was built without CUDA (MOERL_HAVE_CUDA off): no "
               "device policy rank can be built; use job.device=cpu"};
}
}  // namespace

result<std::unique_ptr<ep_device_rank>> ep_device_rank::create(const policy::model_config&,
                                                               policy::expert_exchange&, int) {
  return no_cuda();
}
// No instance exists without CUDA (create refuses); these only satisfy the linker.
result<std::vector<float>> ep_device_rank::params_host() const { return no_cuda(); }
status ep_device_rank::set_params(const std::vector<float>&) { return no_cuda(); }
result<policy::generation> ep_device_rank::generate(
    const std::vector<std::vector<policy::token_id>>&, int, float, std::mt19937_64&) {
  return no_cuda();
}
status ep_device_rank::make_optimizer(const policy::adam_config&) { return no_cuda(); }
result<std::pair<policy::update_stats, double>> ep_device_rank::train_epoch(
    const std::vector<policy::sample>&, const std::vector<double>&, const policy::grpo_config&,
    float, const std::vector<std::pair<size_t, size_t>>&, size_t, fabric::collective_group&) {
  return no_cuda();
}
result<std::string> ep_device_rank::adam_bytes() const { return no_cuda(); }
status ep_device_rank::load_adam(const std::string&) { return no_cuda(); }
status ep_device_rank::broadcast_bytes(fabric::collective_group&, std::string&, int) {
  return no_cuda();
}
result<std::vector<float>> ep_device_rank::broadcast_share(fabric::collective_group&, int) {
  return no_cuda();
}

#endif

}  // namespace moerl::job
