// device_buffer<T>: an owned, resizable block of device memory of n elements, with checked
// copies to and from the host. The one allocation type of the device policy (model_cuda.h):
// parameters, gradients, activations and the KV cache are each a device_buffer, so every
// cudaMalloc/cudaFree of the policy is in this file and every failure is errc::cuda_error
// naming the call (CUDA_CHECK).
//
// Ownership: move-only; frees on destruction (cudaFree synchronises the device, so freeing
// while a stream still reads the buffer is safe, if slow: hot paths reuse buffers instead).
// Threading: as the owner's. Built only when MOERL_HAVE_CUDA; include only from code compiled
// under that definition.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "common/error.h"
#include "kernels/cuda/cuda_check.h"

namespace moerl::policy::cuda {

template <class T>
class device_buffer {
 public:
  device_buffer() = default;
  ~device_buffer() { release(); }
  device_buffer(device_buffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)),
        n_(std::exchange(o.n_, 0)),
        cap_(std::exchange(o.cap_, 0)) {}
  device_buffer& operator=(device_buffer&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
      cap_ = std::exchange(o.cap_, 0);
    }
    return *this;
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  T* get() const { return p_; }
  size_t size() const { return n_; }

  // n elements, contents unspecified; reallocates only when n exceeds what is held, so a
  // buffer reused across steps of similar size allocates once.
  status resize(size_t n) {
    if (n > cap_) {
      release();
      CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(T)));
      cap_ = n;
    }
    n_ = n;
    return ok_status();
  }
  // n elements, all zero (stream-ordered).
  status assign_zero(size_t n, cudaStream_t stream) {
    STATUS_TRY(resize(n));
    if (n) CUDA_CHECK(cudaMemsetAsync(p_, 0, n * sizeof(T), stream));
    return ok_status();
  }
  // The host vector's contents; synchronises `stream` so that `h` may die at return.
  status upload(const std::vector<T>& h, cudaStream_t stream) {
    STATUS_TRY(resize(h.size()));
    if (!h.empty()) {
      CUDA_CHECK(
          cudaMemcpyAsync(p_, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    return ok_status();
  }
  // The device contents into *h (resized); synchronises `stream`.
  status download(std::vector<T>* h, cudaStream_t stream) const {
    h->resize(n_);
    if (n_) {
      CUDA_CHECK(cudaMemcpyAsync(h->data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost, stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    return ok_status();
  }
  // A device-to-device copy of o (stream-ordered).
  status copy_from(const device_buffer& o, cudaStream_t stream) {
    STATUS_TRY(resize(o.n_));
    if (n_) CUDA_CHECK(cudaMemcpyAsync(p_, o.p_, n_ * sizeof(T), cudaMemcpyDeviceToDevice, stream));
    return ok_status();
  }

 private:
  void release() {
    if (p_) cudaFree(p_);
    p_ = nullptr;
    n_ = cap_ = 0;
  }
  T* p_ = nullptr;
  size_t n_ = 0, cap_ = 0;
};

}  // namespace moerl::policy::cuda
