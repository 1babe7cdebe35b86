// The in-process reference of policy/expert_exchange.h: ranks are threads that share memory,
// so each rank reads its peers' tokens and expert outputs straight from their buffers
// between two barriers. make_local_expert_exchange is its one-rank case.
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>

#include "kernels/combine.h"
#include "kernels/thread_pool.h"
#include "policy/expert_exchange.h"

namespace moerl::policy {
namespace {

error bad(const std::string& what) {
  return error{errc::invalid_argument, "in-process expert group: " + what};
}

struct routing;

// What one rank shows its peers during a collective call (valid between its two barriers).
struct posted_call {
  const float* rows = nullptr;  // tokens (dispatch), expert outputs or their gradients
  const int64_t* topk_idx = nullptr;
  const float* topk_weights = nullptr;
  int64_t num_tokens = 0;
  int top_k = 0;
  const routing* rt = nullptr;         // the handle's routing (combine, dispatch_backward)
  const float* row_scalars = nullptr;  // dispatch_backward: one per posted row
};

// What every rank of the group shares: a reusable barrier and one posted call per rank.
struct group_state {
  explicit group_state(int n) : num_ranks(n), posted(n) {}

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
  std::vector<posted_call> posted;  // [rank]
};

// One dispatch seen from the rank that made it, as owner of experts and as source of tokens.
struct routing {
  int num_experts = 0;
  int64_t num_tokens = 0;
  int top_k = 0;
  std::vector<int64_t> topk_idx;    // [num_tokens, top_k] this rank's, copied
  std::vector<float> topk_weights;  // [num_tokens, top_k]
  // As owner: received row i came from token src_token[i] of rank src_rank[i]; entry (t, k)
  // of source s landed in row recv_row[s][t * top_k + k] (-1: not on this rank).
  std::vector<int32_t> src_rank;
  std::vector<int64_t> src_token;
  std::vector<std::vector<int64_t>> recv_row;
};

class inprocess_exchange final : public expert_exchange {
 public:
  inprocess_exchange(std::shared_ptr<group_state> g, int rank)
      : g_(std::move(g)), rank_(rank), pool_(1) {}
  int rank() const override { return rank_; }
  int num_ranks() const override { return g_->num_ranks; }

  result<exchange_handle> dispatch(const float* x, const int64_t* topk_idx,
                                   const float* topk_weights, int64_t num_tokens, int top_k,
                                   int num_experts, int64_t hidden, exchange_mode,
                                   std::vector<float>* recv_x) override {
    // Every rank is built with the same shape, so every rank refuses the same call here.
    if (num_experts <= 0 || num_experts % num_ranks() != 0)
      return bad(std::to_string(num_experts) + " experts do not split over " +
                 std::to_string(num_ranks()) + " ranks");
    if (hidden <= 0 || top_k <= 0 || num_tokens < 0)
      return bad("hidden and top_k must be > 0, num_tokens >= 0");
    g_->posted[rank_] = posted_call{x, topk_idx, topk_weights, num_tokens, top_k, nullptr, nullptr};
    g_->barrier();
    auto rt = std::make_shared<routing>();
    status st = build_routing(num_experts, *rt);  // the same verdict on every rank
    exchange_handle h;
    if (st) {
      h = handle_of(rt);
      gather(*rt, hidden, recv_x);
    }
    g_->barrier();  // sources may reuse their buffers only after everyone has read them
    if (!st) return st.err();
    return h;
  }

  status dispatch_cached(const exchange_handle& h, const float* x, int64_t hidden, exchange_mode,
                         std::vector<float>* recv_x) override {
    const routing* rt = routing_of(h);
    if (!rt) return bad("dispatch_cached: the handle does not come from this exchange");
    g_->posted[rank_] = posted_call{x, nullptr, nullptr, rt->num_tokens, rt->top_k, rt, nullptr};
    g_->barrier();
    gather(*rt, hidden, recv_x);
    g_->barrier();
    return ok_status();
  }

  status combine(const exchange_handle& h, const float* expert_out, int64_t hidden, exchange_mode,
                 float* y) override {
    const routing* rt = routing_of(h);
    if (!rt) return bad("combine: the handle does not come from this exchange");
    return reduce(*rt, expert_out, rt->topk_weights.data(), hidden, y, nullptr, nullptr);
  }

  status dispatch_backward(const exchange_handle& h, const float* grad_recv_x,
                           const float* grad_recv_weights, int64_t hidden, exchange_mode,
                           float* grad_x, float* grad_topk_weights) override {
    const routing* rt = routing_of(h);
    if (!rt) return bad("dispatch_backward: the handle does not come from this exchange");
    ones_.assign(static_cast<size_t>(rt->num_tokens * rt->top_k), 1.0f);
    return reduce(*rt, grad_recv_x, ones_.data(), hidden, grad_x, grad_recv_weights,
                  grad_topk_weights);
  }

 private:
  const routing* routing_of(const exchange_handle& h) const {
    return h.issuer == this ? static_cast<const routing*>(h.impl.get()) : nullptr;
  }

  // From every rank's posted routing: the rows this rank receives, in the contract's order
  // (local expert, then source rank, token, k).
  status build_routing(int num_experts, routing& rt) const {
    const posted_call& me = g_->posted[rank_];
    const int R = num_ranks(), local = num_experts / R;
    for (int s = 0; s < R; ++s) {
      const posted_call& p = g_->posted[s];
      for (int64_t i = 0; i < p.num_tokens * p.top_k; ++i)
        if (p.topk_idx[i] < -1 || p.topk_idx[i] >= num_experts)
          return bad("rank " + std::to_string(s) + " routes token " + std::to_string(i / p.top_k) +
                     " to expert " + std::to_string(p.topk_idx[i]) + " of " +
                     std::to_string(num_experts));
    }
    rt.num_experts = num_experts;
    rt.num_tokens = me.num_tokens;
    rt.top_k = me.top_k;
    rt.topk_idx.assign(me.topk_idx, me.topk_idx + me.num_tokens * me.top_k);
    rt.topk_weights.assign(me.topk_weights, me.topk_weights + me.num_tokens * me.top_k);
    rt.recv_row.resize(R);
    for (int s = 0; s < R; ++s)
      rt.recv_row[s].assign(static_cast<size_t>(g_->posted[s].num_tokens * g_->posted[s].top_k),
                            -1);
    // A counting sort of every source's entries into (local expert, source) blocks; entries
    // keep their (token, k) order inside a block.
    const int64_t first = static_cast<int64_t>(rank_) * local;
    auto block = [&](int64_t e, int s) { return (e - first) * R + s; };
    auto is_local = [&](int64_t e) { return e >= first && e < first + local; };
    std::vector<int64_t> next(static_cast<size_t>(local * R) + 1, 0);
    for (int s = 0; s < R; ++s) {
      const posted_call& p = g_->posted[s];
      for (int64_t i = 0; i < p.num_tokens * p.top_k; ++i)
        if (is_local(p.topk_idx[i])) ++next[block(p.topk_idx[i], s) + 1];
    }
    for (size_t b = 1; b < next.size(); ++b) next[b] += next[b - 1];
    rt.src_rank.resize(static_cast<size_t>(next.back()));
    rt.src_token.resize(static_cast<size_t>(next.back()));
    for (int s = 0; s < R; ++s) {
      const posted_call& p = g_->posted[s];
      for (int64_t i = 0; i < p.num_tokens * p.top_k; ++i) {
        if (!is_local(p.topk_idx[i])) continue;
        const int64_t row = next[block(p.topk_idx[i], s)]++;
        rt.recv_row[s][i] = row;
        rt.src_rank[row] = s;
        rt.src_token[row] = i / p.top_k;
      }
    }
    return ok_status();
  }

  exchange_handle handle_of(const std::shared_ptr<routing>& rt) const {
    exchange_handle h;
    h.issuer = this;
    h.num_tokens = rt->num_tokens;
    h.top_k = rt->top_k;
    h.num_recv_rows = static_cast<int64_t>(rt->src_rank.size());
    const int local = rt->num_experts / num_ranks();
    h.local_expert_offset.assign(local + 1, 0);
    h.recv_weights.resize(static_cast<size_t>(h.num_recv_rows));
    for (int s = 0; s < num_ranks(); ++s)
      for (size_t i = 0; i < rt->recv_row[s].size(); ++i) {
        const int64_t row = rt->recv_row[s][i];
        if (row < 0) continue;
        const int j = static_cast<int>(g_->posted[s].topk_idx[i]) - rank_ * local;
        ++h.local_expert_offset[j + 1];
        h.recv_weights[row] = g_->posted[s].topk_weights[i];
      }
    for (int j = 0; j < local; ++j) h.local_expert_offset[j + 1] += h.local_expert_offset[j];
    h.impl = rt;
    return h;
  }

  // Copies each received row from its source's posted tokens.
  void gather(const routing& rt, int64_t hidden, std::vector<float>* recv_x) const {
    recv_x->resize(rt.src_rank.size() * hidden);
    for (size_t i = 0; i < rt.src_rank.size(); ++i)
      std::memcpy(recv_x->data() + i * hidden,
                  g_->posted[rt.src_rank[i]].rows + rt.src_token[i] * hidden,
                  hidden * sizeof(float));
  }

  // The way back: every owner posts its rows; token t of this rank sums weight[t, k] * the
  // row its entry (t, k) became at the owner, in k order (kernels::combine_rows_forward).
  // row_scalars (optional): one float per received row, returned to its entry in
  // scalars_out [num_tokens, top_k] (0 for unused slots).
  status reduce(const routing& rt, const float* rows, const float* weights, int64_t hidden,
                float* out, const float* row_scalars, float* scalars_out) {
    g_->posted[rank_] = posted_call{rows, nullptr, nullptr, 0, 0, &rt, row_scalars};
    g_->barrier();
    const int local = rt.num_experts / num_ranks();
    const int64_t entries = rt.num_tokens * rt.top_k;
    terms_.assign(static_cast<size_t>(entries), nullptr);
    for (int64_t i = 0; i < entries; ++i) {
      const int64_t e = rt.topk_idx[i];
      if (scalars_out) scalars_out[i] = 0.0f;
      if (e < 0) continue;
      const posted_call& owner = g_->posted[e / local];
      const int64_t row = owner.rt->recv_row[rank_][i];
      terms_[i] = owner.rows + row * hidden;
      if (scalars_out) scalars_out[i] = owner.row_scalars[row];
    }
    status st = kernels::combine_rows_forward(pool_, terms_.data(), weights, rt.num_tokens,
                                              rt.top_k, hidden, out);
    g_->barrier();  // owners may reuse their rows only after everyone has read them
    return st;
  }

  std::shared_ptr<group_state> g_;
  int rank_;
  kernels::thread_pool pool_;  // one thread: the caller (ranks are threads already)
  std::vector<const float*> terms_;
  std::vector<float> ones_;
};

}  // namespace

std::vector<std::unique_ptr<expert_exchange>> make_inprocess_expert_group(int num_ranks) {
  auto g = std::make_shared<group_state>(num_ranks);
  std::vector<std::unique_ptr<expert_exchange>> out;
  for (int r = 0; r < num_ranks; ++r) out.push_back(std::make_unique<inprocess_exchange>(g, r));
  return out;
}

std::unique_ptr<expert_exchange> make_local_expert_exchange() {
  return std::move(make_inprocess_expert_group(1).front());
}

}  // namespace moerl::policy
