// device_expert_exchange over a host expert_exchange with explicit staging
// (device_expert_exchange.h: the interim path until the expert plane takes device memory).
#include <vector>

#include "common/status_try.h"
#include "policy/cuda/device_expert_exchange.h"

namespace moerl::policy::cuda {

namespace {

// n elements of device memory into *h (resized); synchronises `stream`.
template <class T>
status to_host(cudaStream_t stream, const T* d, size_t n, std::vector<T>* h) {
  h->resize(n);
  if (n == 0) return ok_status();
  CUDA_CHECK(cudaMemcpyAsync(h->data(), d, n * sizeof(T), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return ok_status();
}

// h into device memory d; synchronises `stream` (h may die at return).
template <class T>
status to_device(cudaStream_t stream, const std::vector<T>& h, T* d) {
  if (h.empty()) return ok_status();
  CUDA_CHECK(cudaMemcpyAsync(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return ok_status();
}

class host_staged_exchange final : public device_expert_exchange {
 public:
  explicit host_staged_exchange(expert_exchange& host) : host_(host) {}
  int rank() const override { return host_.rank(); }
  int num_ranks() const override { return host_.num_ranks(); }

  result<exchange_handle> dispatch(cudaStream_t stream, const float* x, const int64_t* topk_idx,
                                   const float* topk_weights, int64_t n, int top_k, int num_experts,
                                   int64_t hidden, exchange_mode mode,
                                   device_buffer<float>* recv_x) override {
    STATUS_TRY(to_host(stream, x, size_t(n * hidden), &x_));
    STATUS_TRY(to_host(stream, topk_idx, size_t(n * top_k), &idx_));
    STATUS_TRY(to_host(stream, topk_weights, size_t(n * top_k), &w_));
    ASSIGN_OR_RETURN(exchange_handle h, host_.dispatch(x_.data(), idx_.data(), w_.data(), n, top_k,
                                                       num_experts, hidden, mode, &rows_));
    STATUS_TRY(recv_x->resize(rows_.size()));
    STATUS_TRY(to_device(stream, rows_, recv_x->get()));
    return h;
  }

  status combine(cudaStream_t stream, const exchange_handle& h, const float* expert_out,
                 int64_t hidden, exchange_mode mode, float* y) override {
    STATUS_TRY(to_host(stream, expert_out, size_t(h.num_recv_rows * hidden), &rows_));
    x_.resize(size_t(h.num_tokens * hidden));
    STATUS_TRY(host_.combine(h, rows_.data(), hidden, mode, x_.data()));
    return to_device(stream, x_, y);
  }

  status dispatch_cached(cudaStream_t stream, const exchange_handle& h, const float* x,
                         int64_t hidden, exchange_mode mode,
                         device_buffer<float>* recv_x) override {
    STATUS_TRY(to_host(stream, x, size_t(h.num_tokens * hidden), &x_));
    STATUS_TRY(host_.dispatch_cached(h, x_.data(), hidden, mode, &rows_));
    STATUS_TRY(recv_x->resize(rows_.size()));
    return to_device(stream, rows_, recv_x->get());
  }

  status dispatch_backward(cudaStream_t stream, const exchange_handle& h, const float* grad_recv_x,
                           const float* grad_recv_weights, int64_t hidden, exchange_mode mode,
                           float* grad_x, float* grad_topk_weights) override {
    STATUS_TRY(to_host(stream, grad_recv_x, size_t(h.num_recv_rows * hidden), &rows_));
    STATUS_TRY(to_host(stream, grad_recv_weights, size_t(h.num_recv_rows), &w_));
    x_.resize(size_t(h.num_tokens * hidden));
    std::vector<float> grad_w(size_t(h.num_tokens * h.top_k));
    STATUS_TRY(host_.dispatch_backward(h, rows_.data(), w_.data(), hidden, mode, x_.data(),
                                       grad_w.data()));
    STATUS_TRY(to_device(stream, x_, grad_x));
    return to_device(stream, grad_w, grad_topk_weights);
  }

 private:
  expert_exchange& host_;
  // Staging buffers, reused across calls (one thread drives the exchange).
  std::vector<float> x_, w_, rows_;
  std::vector<int64_t> idx_;
};

}  // namespace

std::unique_ptr<device_expert_exchange> make_host_staged_exchange(expert_exchange& host) {
  return std::make_unique<host_staged_exchange>(host);
}

}  // namespace moerl::policy::cuda
