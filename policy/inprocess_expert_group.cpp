#include <condition_variable>
#include <cstring>
#include <mutex>

#include "policy/expert_exchange.h"

namespace moerl::policy {
namespace {

// What every rank of the group shares: a reusable barrier and one posted buffer per rank.
struct group_state {
  explicit group_state(int n) : num_ranks(n), posted(n, nullptr), posted_offsets(n) {}

  void barrier() {
    std::unique_lock<std::mutex> lk(mu);
    const uint64_t gen = generation;
    if (++arrived == num_ranks) {
      arrived = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lk, [&] { return generation != gen; });
    }
  }

  const int num_ranks;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  std::vector<const float*> posted;                  // [rank] buffer of the current call
  std::vector<std::vector<int64_t>> posted_offsets;  // [rank] expert_offset at dispatch
};

// Every rank's expert_offset of one dispatch: enough to locate any (expert, source) block
// in any rank's send or receive buffer, so cached dispatches and combines need no exchange.
struct routing_table {
  int num_experts = 0;
  std::vector<std::vector<int64_t>> offsets;  // [rank][num_experts + 1]
  int64_t count(int expert, int src) const {
    return offsets[src][expert + 1] - offsets[src][expert];
  }
};

class inprocess_exchange final : public expert_exchange {
 public:
  inprocess_exchange(std::shared_ptr<group_state> g, int rank) : g_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int num_ranks() const override { return g_->num_ranks; }

  result<exchange_handle> dispatch(const float* send_rows, const int64_t* expert_offset,
                                   int num_experts, int64_t hidden, exchange_mode,
                                   std::vector<float>* recv_rows) override {
    if (num_experts % num_ranks() != 0)
      return error{errc::invalid_argument,
                   "in-process expert group: " + std::to_string(num_experts) +
                       " experts do not split over " + std::to_string(num_ranks()) + " ranks"};
    g_->posted_offsets[rank_].assign(expert_offset, expert_offset + num_experts + 1);
    g_->barrier();
    auto table = std::make_shared<routing_table>();
    table->num_experts = num_experts;
    table->offsets = g_->posted_offsets;  // every rank copies the same table
    g_->barrier();                        // before anyone overwrites posted_offsets again
    exchange_handle h;
    h.impl = table;
    h.num_send_rows = expert_offset[num_experts];
    const int local = num_experts / num_ranks();
    h.local_expert_offset.assign(local + 1, 0);
    for (int j = 0; j < local; ++j) {
      int64_t rows = 0;
      for (int src = 0; src < num_ranks(); ++src) rows += table->count(rank_ * local + j, src);
      h.local_expert_offset[j + 1] = h.local_expert_offset[j] + rows;
    }
    h.num_recv_rows = h.local_expert_offset[local];
    if (auto st = dispatch_cached(h, send_rows, hidden, exchange_mode::normal, recv_rows); !st)
      return st.err();
    return h;
  }

  status dispatch_cached(const exchange_handle& h, const float* send_rows, int64_t hidden,
                         exchange_mode, std::vector<float>* recv_rows) override {
    const auto& table = *static_cast<const routing_table*>(h.impl.get());
    g_->posted[rank_] = send_rows;
    g_->barrier();
    recv_rows->resize(h.num_recv_rows * hidden);
    const int local = table.num_experts / num_ranks();
    int64_t at = 0;
    for (int j = 0; j < local; ++j) {
      const int e = rank_ * local + j;
      for (int src = 0; src < num_ranks(); ++src) {
        const int64_t n = table.count(e, src);
        std::memcpy(recv_rows->data() + at * hidden,
                    g_->posted[src] + table.offsets[src][e] * hidden, n * hidden * sizeof(float));
        at += n;
      }
    }
    g_->barrier();  // sources may reuse their buffers only after everyone has read them
    return ok_status();
  }

  status combine(const exchange_handle& h, const float* recv_rows, int64_t hidden, exchange_mode,
                 float* send_rows) override {
    const auto& table = *static_cast<const routing_table*>(h.impl.get());
    g_->posted[rank_] = recv_rows;
    g_->barrier();
    const int local = table.num_experts / num_ranks();
    for (int e = 0; e < table.num_experts; ++e) {
      const int owner = e / local;
      // Where this rank's block of expert e starts inside the owner's receive buffer.
      int64_t start = 0;
      for (int e2 = owner * local; e2 < e; ++e2)
        for (int src = 0; src < num_ranks(); ++src) start += table.count(e2, src);
      for (int src = 0; src < rank_; ++src) start += table.count(e, src);
      std::memcpy(send_rows + table.offsets[rank_][e] * hidden, g_->posted[owner] + start * hidden,
                  table.count(e, rank_) * hidden * sizeof(float));
    }
    g_->barrier();
    return ok_status();
  }

 private:
  std::shared_ptr<group_state> g_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<expert_exchange>> make_inprocess_expert_group(int num_ranks) {
  auto g = std::make_shared<group_state>(num_ranks);
  std::vector<std::unique_ptr<expert_exchange>> out;
  for (int r = 0; r < num_ranks; ++r) out.push_back(std::make_unique<inprocess_exchange>(g, r));
  return out;
}

}  // namespace moerl::policy
