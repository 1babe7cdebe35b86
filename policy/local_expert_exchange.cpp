#include <algorithm>

#include "policy/expert_exchange.h"

namespace moerl::policy {
namespace {

// With one rank every expert is local, so the received buffer is the send buffer: copies,
// kept so the MoE layer runs the same code path as with a real expert-parallel group.
class local_expert_exchange final : public expert_exchange {
 public:
  int rank() const override { return 0; }
  int num_ranks() const override { return 1; }

  result<exchange_handle> dispatch(const float* send_rows, const int64_t* expert_offset,
                                   int num_experts, int64_t hidden, exchange_mode,
                                   std::vector<float>* recv_rows) override {
    if (num_experts <= 0 || hidden <= 0)
      return error{errc::invalid_argument, "expert exchange: num_experts and hidden must be > 0"};
    exchange_handle h;
    h.num_send_rows = expert_offset[num_experts];
    h.num_recv_rows = h.num_send_rows;
    h.local_expert_offset.assign(expert_offset, expert_offset + num_experts + 1);
    recv_rows->assign(send_rows, send_rows + h.num_send_rows * hidden);
    return h;
  }

  status dispatch_cached(const exchange_handle& h, const float* send_rows, int64_t hidden,
                         exchange_mode, std::vector<float>* recv_rows) override {
    recv_rows->assign(send_rows, send_rows + h.num_send_rows * hidden);
    return ok_status();
  }

  status combine(const exchange_handle& h, const float* recv_rows, int64_t hidden, exchange_mode,
                 float* send_rows) override {
    std::copy(recv_rows, recv_rows + h.num_recv_rows * hidden, send_rows);
    return ok_status();
  }
};

}  // namespace

std::unique_ptr<expert_exchange> make_local_expert_exchange() {
  return std::make_unique<local_expert_exchange>();
}

}  // namespace moerl::policy
