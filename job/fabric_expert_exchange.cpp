#include "job/fabric_expert_exchange.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/config.h"
#include "fabric/ep_group.h"

namespace moerl::job {
namespace {

using policy::exchange_handle;
using policy::exchange_mode;

error bad(const std::string& what) {
  return error{errc::invalid_argument, "fabric expert exchange: " + what};
}

const char* mode_name(exchange_mode m) {
  return m == exchange_mode::low_latency ? "low_latency" : "normal";
}

// Prefixes an error from fabric/ with the operation and the group it happened in.
error from_fabric(const char* op, exchange_mode mode, const error& e) {
  return error{e.code, std::string("fabric expert exchange: ") + op + " (" + mode_name(mode) +
                           " group): " + e.message};
}

// What a handle keeps: its dispatch's routing, which a group reads until the step's combine
// and which dispatch_cached sends again.
struct routing {
  uint64_t id = 0;  // the dispatch call that made it (the same on every rank)
  int64_t num_tokens = 0;
  int top_k = 0;
  std::vector<int64_t> topk_idx;    // [num_tokens, top_k]
  std::vector<float> topk_weights;  // [num_tokens, top_k]
  int64_t num_recv_rows = 0;
  std::vector<int64_t> local_expert_offset;  // what the dispatch received, to check repeats
};

// One ep_group and the step it has open: forward (dispatch, awaiting combine) or backward
// (dispatch_cached, awaiting dispatch_backward).
struct mode_group {
  std::unique_ptr<fabric::ep_group> g;
  exchange_mode mode = exchange_mode::normal;
  int64_t max_tokens = 0;
  std::shared_ptr<const routing> open;
  bool open_backward = false;
  const fabric::dispatch_output* out = nullptr;  // the group's output of the open step
};

class fabric_exchange_impl final : public fabric_expert_exchange {
 public:
  explicit fabric_exchange_impl(const fabric_exchange_options& opt)
      : opt_(opt), width_(opt.hidden + opt.top_k) {}

  status init(fabric::bootstrap& boot) {
    if (opt_.num_experts < 1) return bad("num_experts must be >= 1");
    if (opt_.hidden < 1) return bad("hidden must be >= 1");
    if (opt_.top_k < 1 || opt_.top_k > opt_.num_experts)
      return bad("top_k must be in 1.." + std::to_string(opt_.num_experts));
    if (opt_.max_tokens_per_rank < 1) return bad("max_tokens_per_rank must be >= 1");
    if (opt_.max_decode_tokens_per_rank < 0) return bad("max_decode_tokens_per_rank must be >= 0");
    const std::vector<int> members =
        opt_.members.empty() ? fabric::all_members(boot) : opt_.members;
    if (members.empty() || opt_.num_experts % static_cast<int>(members.size()) != 0)
      return bad(std::to_string(opt_.num_experts) + " experts do not split over " +
                 std::to_string(members.size()) + " ranks");
    normal_.mode = exchange_mode::normal;
    normal_.max_tokens = opt_.max_tokens_per_rank;
    if (auto st = create(boot, members, fabric::ep_mode::normal, normal_); !st) return st;
    if (opt_.low_latency_group) {
      low_latency_.mode = exchange_mode::low_latency;
      low_latency_.max_tokens = opt_.max_decode_tokens_per_rank > 0
                                    ? opt_.max_decode_tokens_per_rank
                                    : opt_.max_tokens_per_rank;
      if (auto st = create(boot, members, fabric::ep_mode::low_latency, low_latency_); !st)
        return st;
    }
    ones_.assign(
        static_cast<size_t>(std::max(normal_.max_tokens, low_latency_.max_tokens) * opt_.top_k),
        1.0f);
    return ok_status();
  }

  int rank() const override { return normal_.g->rank(); }
  int num_ranks() const override { return normal_.g->num_ranks(); }
  const fabric::transport_description& describe() const override { return normal_.g->describe(); }

  result<exchange_handle> dispatch(const float* x, const int64_t* topk_idx,
                                   const float* topk_weights, int64_t num_tokens, int top_k,
                                   int num_experts, int64_t hidden, exchange_mode mode,
                                   std::vector<float>* recv_x) override {
    if (num_experts != opt_.num_experts)
      return bad("dispatch with " + std::to_string(num_experts) +
                 " experts; the exchange was built for " + std::to_string(opt_.num_experts));
    if (top_k != opt_.top_k)
      return bad("dispatch with top_k " + std::to_string(top_k) + "; the exchange was built for " +
                 std::to_string(opt_.top_k));
    if (auto st = check_hidden(hidden); !st) return st.err();
    if (num_tokens < 0) return bad("dispatch: num_tokens must be >= 0");
    if (!recv_x || (num_tokens > 0 && (!x || !topk_idx || !topk_weights)))
      return bad("dispatch: null input or recv_x");
    mode_group& mg = group_for(mode);
    if (auto st = check_step(mg, num_tokens, "dispatch"); !st) return st.err();

    auto rt = std::make_shared<routing>();
    rt->id = ++next_id_;
    rt->num_tokens = num_tokens;
    rt->top_k = top_k;
    rt->topk_idx.assign(topk_idx, topk_idx + num_tokens * top_k);
    rt->topk_weights.assign(topk_weights, topk_weights + num_tokens * top_k);
    // A token's row: its payload, then its top-k weights (the side band, see the header).
    float* rows = stage_tokens(mg, x, num_tokens);
    if (!rows) return mid_step(mg, "dispatch");
    for (int64_t t = 0; t < num_tokens; ++t)
      std::memcpy(rows + t * width_ + hidden, topk_weights + t * top_k, top_k * sizeof(float));
    if (auto st = run_dispatch(mg, rt, rows, rt->topk_weights.data(), false, "dispatch", recv_x);
        !st)
      return st.err();

    const fabric::dispatch_output& out = *mg.out;
    rt->num_recv_rows = out.num_recv_rows;
    rt->local_expert_offset = out.expert_offset;
    exchange_handle h;
    h.issuer = this;
    h.num_tokens = num_tokens;
    h.top_k = top_k;
    h.num_recv_rows = out.num_recv_rows;
    h.local_expert_offset = out.expert_offset;
    h.recv_weights.resize(static_cast<size_t>(out.num_recv_rows));
    const auto* recv = static_cast<const float*>(out.recv_x);
    for (int64_t r = 0; r < out.num_recv_rows; ++r)
      h.recv_weights[r] = recv[r * width_ + hidden + out.src_k[r]];
    h.impl = rt;
    return h;
  }

  status combine(const exchange_handle& h, const float* expert_out, int64_t hidden,
                 exchange_mode mode, float* y) override {
    auto rt = open_step_of(h, mode, false, "combine", hidden);
    if (!rt) return rt.err();
    if ((h.num_recv_rows > 0 && !expert_out) || (h.num_tokens > 0 && !y))
      return bad("combine: null expert_out or y");
    mode_group& mg = group_for(mode);
    float* rows = stage_outputs(mg, expert_out);
    if (!rows) return mid_step(mg, "combine");
    return run_combine(mg, rows, "combine", [&](const float* row, int64_t t) {
      std::memcpy(y + t * hidden, row, hidden * sizeof(float));
    });
  }

  status dispatch_cached(const exchange_handle& h, const float* x, int64_t hidden,
                         exchange_mode mode, std::vector<float>* recv_x) override {
    auto rt = routing_of(h, "dispatch_cached", hidden);
    if (!rt) return rt.err();
    if (!recv_x || (h.num_tokens > 0 && !x)) return bad("dispatch_cached: null x or recv_x");
    mode_group& mg = group_for(mode);
    if (auto st = check_step(mg, h.num_tokens, "dispatch_cached"); !st) return st;
    // Weight 1: this step's combine (dispatch_backward) is an unweighted sum.
    float* rows = stage_tokens(mg, x, h.num_tokens);
    if (!rows) return mid_step(mg, "dispatch_cached");
    return run_dispatch(mg, *rt, rows, ones_.data(), true, "dispatch_cached", recv_x);
  }

  status dispatch_backward(const exchange_handle& h, const float* grad_recv_x,
                           const float* grad_recv_weights, int64_t hidden, exchange_mode mode,
                           float* grad_x, float* grad_topk_weights) override {
    auto rt = open_step_of(h, mode, true, "dispatch_backward", hidden);
    if (!rt) return rt.err();
    if ((h.num_recv_rows > 0 && (!grad_recv_x || !grad_recv_weights)) ||
        (h.num_tokens > 0 && (!grad_x || !grad_topk_weights)))
      return bad("dispatch_backward: null input or output");
    mode_group& mg = group_for(mode);
    float* rows = stage_outputs(mg, grad_recv_x);
    if (!rows) return mid_step(mg, "dispatch_backward");
    // Row (t, k) carries its weight's gradient at column hidden + k; the other rows of t hold
    // 0 there, so the group's sum over k returns it unchanged.
    const fabric::dispatch_output& out = *mg.out;
    for (int64_t r = 0; r < out.num_recv_rows; ++r)
      rows[r * width_ + hidden + out.src_k[r]] = grad_recv_weights[r];
    const routing& route = **rt;
    return run_combine(mg, rows, "dispatch_backward", [&](const float* row, int64_t t) {
      std::memcpy(grad_x + t * hidden, row, hidden * sizeof(float));
      for (int k = 0; k < route.top_k; ++k) {
        const int64_t i = t * route.top_k + k;
        grad_topk_weights[i] = route.topk_idx[i] >= 0 ? row[hidden + k] : 0.0f;
      }
    });
  }

 private:
  status create(fabric::bootstrap& boot, const std::vector<int>& members, fabric::ep_mode m,
                mode_group& mg) {
    fabric::ep_config cfg;
    cfg.mode = m;
    cfg.num_experts = opt_.num_experts;
    cfg.hidden = width_;
    cfg.topk = opt_.top_k;
    cfg.max_tokens_per_rank = mg.max_tokens;
    cfg.dtype = fabric::ep_dtype::fp32;  // exact: training gradients travel this way too
    cfg.chunk_bytes = opt_.chunk_bytes;
    cfg.op_timeout_ms = opt_.op_timeout_ms;
    if (m == fabric::ep_mode::normal) cfg.ranks_per_node = opt_.ranks_per_node;
    auto g = fabric::ep_group::create(opt_.transport, boot, members, cfg);
    if (!g) return from_fabric("create", mg.mode, g.err());
    mg.g = std::move(*g);
    return ok_status();
  }

  mode_group& group_for(exchange_mode mode) {
    return mode == exchange_mode::low_latency && low_latency_.g ? low_latency_ : normal_;
  }

  status check_hidden(int64_t hidden) const {
    if (hidden != opt_.hidden)
      return bad("rows of " + std::to_string(hidden) + " floats; the exchange was built for " +
                 std::to_string(opt_.hidden));
    return ok_status();
  }

  // A new step on `mg`: none open there, and within the group's bound.
  status check_step(const mode_group& mg, int64_t tokens, const char* op) const {
    if (mg.open)
      return bad(std::string(op) + ": the " + mode_name(mg.mode) +
                 " group's previous step is still open (a dispatch awaits its combine, a "
                 "dispatch_cached its dispatch_backward)");
    if (tokens > mg.max_tokens)
      return bad(std::string(op) + ": " + std::to_string(tokens) + " tokens exceed the " +
                 mode_name(mg.mode) + " group's bound of " + std::to_string(mg.max_tokens) +
                 " tokens per rank (fabric_exchange_options::" +
                 (mg.mode == exchange_mode::low_latency && opt_.max_decode_tokens_per_rank > 0
                      ? "max_decode_tokens_per_rank"
                      : "max_tokens_per_rank") +
                 ")");
    return ok_status();
  }

  result<std::shared_ptr<const routing>> routing_of(const exchange_handle& h, const char* op,
                                                    int64_t hidden) const {
    if (auto st = check_hidden(hidden); !st) return st.err();
    if (h.issuer != this || !h.impl)
      return bad(std::string(op) + ": the handle does not come from this exchange's dispatch");
    auto rt = std::static_pointer_cast<const routing>(h.impl);
    if (rt->num_tokens != h.num_tokens || rt->num_recv_rows != h.num_recv_rows ||
        static_cast<int64_t>(h.recv_weights.size()) != h.num_recv_rows)
      return bad(std::string(op) + ": the handle's row counts were changed after its dispatch");
    return rt;
  }

  // The handle's routing, which must be `mg`'s open step of the given kind.
  result<std::shared_ptr<const routing>> open_step_of(const exchange_handle& h, exchange_mode mode,
                                                      bool backward, const char* op,
                                                      int64_t hidden) {
    auto rt = routing_of(h, op, hidden);
    if (!rt) return rt;
    const mode_group& mg = group_for(mode);
    if (mg.open != *rt || mg.open_backward != backward)
      return bad(std::string(op) + ": the handle is not the " + mode_name(mg.mode) +
                 " group's open step (pair each dispatch with its combine and each "
                 "dispatch_cached with its dispatch_backward, in the same mode)");
    return rt;
  }

  // The group has no buffer to offer: it stopped mid-step after an earlier failure.
  error mid_step(const mode_group& mg, const char* op) const {
    return error{errc::internal, std::string("fabric expert exchange: ") + op + " (" +
                                     mode_name(mg.mode) +
                                     " group): the group stopped mid-step after an earlier "
                                     "failure; recreate the exchange"};
  }

  // Writes the tokens' payloads into the group's dispatch buffer (rows of width_: the side
  // band is filled by the caller, zeros here).
  float* stage_tokens(mode_group& mg, const float* x, int64_t num_tokens) {
    auto* rows = static_cast<float*>(mg.g->dispatch_buffer());
    if (!rows) return nullptr;
    for (int64_t t = 0; t < num_tokens; ++t) {
      std::memcpy(rows + t * width_, x + t * opt_.hidden, opt_.hidden * sizeof(float));
      std::fill_n(rows + t * width_ + opt_.hidden, opt_.top_k, 0.0f);
    }
    return rows;
  }

  // The same for expert outputs, into the group's combine buffer (where low-latency sources
  // on this host read them in place).
  float* stage_outputs(mode_group& mg, const float* out_rows) {
    auto* rows = static_cast<float*>(mg.g->combine_buffer());
    if (!rows) return nullptr;
    for (int64_t r = 0; r < mg.out->num_recv_rows; ++r) {
      std::memcpy(rows + r * width_, out_rows + r * opt_.hidden, opt_.hidden * sizeof(float));
      std::fill_n(rows + r * width_ + opt_.hidden, opt_.top_k, 0.0f);
    }
    return rows;
  }

  // Dispatches the staged rows along `rt` and copies the payload of what arrived into
  // recv_x; leaves the step open for its combine. A repeated routing must receive what its
  // first dispatch received (it does unless a rank broke the collective contract).
  status run_dispatch(mode_group& mg, const std::shared_ptr<const routing>& rt, const float* rows,
                      const float* weights, bool backward, const char* op,
                      std::vector<float>* recv_x) {
    auto d = mg.g->dispatch(rows, rt->topk_idx.data(), weights, rt->num_tokens);
    if (!d) return from_fabric(op, mg.mode, d.err());
    mg.open = rt;
    mg.open_backward = backward;
    mg.out = *d;
    const fabric::dispatch_output& out = **d;
    if (backward && out.expert_offset != rt->local_expert_offset)
      return error{errc::internal, std::string("fabric expert exchange: ") + op +
                                       ": the repeated dispatch received other per-expert "
                                       "counts than the handle's (a rank broke the collective "
                                       "contract)"};
    recv_x->resize(static_cast<size_t>(out.num_recv_rows * opt_.hidden));
    const auto* src = static_cast<const float*>(out.recv_x);
    for (int64_t r = 0; r < out.num_recv_rows; ++r)
      std::memcpy(recv_x->data() + r * opt_.hidden, src + r * width_, opt_.hidden * sizeof(float));
    return ok_status();
  }

  // Combines the open step and hands each token's summed row (width_ floats) to `take`.
  template <class Take>
  status run_combine(mode_group& mg, const float* rows, const char* op, Take take) {
    const int64_t n = mg.open->num_tokens;
    summed_.resize(static_cast<size_t>(std::max<int64_t>(n, 1) * width_));
    auto st = mg.g->combine(*mg.out, rows, summed_.data());
    mg.open.reset();
    if (!st) return from_fabric(op, mg.mode, st.err());
    for (int64_t t = 0; t < n; ++t) take(summed_.data() + t * width_, t);
    return ok_status();
  }

  fabric_exchange_options opt_;
  int64_t width_;  // floats per row on the groups: hidden + top_k (the side band)
  mode_group normal_, low_latency_;
  uint64_t next_id_ = 0;
  std::vector<float> ones_;    // the weights of a backward step
  std::vector<float> summed_;  // a combine's result rows, side band included
};

}  // namespace

result<fabric_exchange_options> fabric_exchange_options_from_config(const moerl::config& cfg,
                                                                    int64_t max_train_tokens,
                                                                    int64_t max_decode_sequences) {
  if (max_train_tokens < 0 || max_decode_sequences < 0 ||
      (max_train_tokens == 0 && max_decode_sequences == 0))
    return bad("options: max_train_tokens (" + std::to_string(max_train_tokens) +
               ") and max_decode_sequences (" + std::to_string(max_decode_sequences) +
               ") must be >= 0 and not both 0");
  fabric_exchange_options o;
  o.transport = fabric::transport_options::from_config(cfg);
  o.op_timeout_ms = cfg.get_int("fabric.op_timeout_ms");
  o.num_experts = static_cast<int>(cfg.get_int("policy.num_experts"));
  o.hidden = cfg.get_int("policy.d_model");
  o.top_k = static_cast<int>(cfg.get_int("policy.top_k"));
  o.max_tokens_per_rank = max_train_tokens > 0 ? max_train_tokens : max_decode_sequences;
  o.max_decode_tokens_per_rank = max_decode_sequences > 0 ? max_decode_sequences : max_train_tokens;
  return o;
}

result<std::unique_ptr<fabric_expert_exchange>> make_fabric_expert_exchange(
    fabric::bootstrap& boot, const fabric_exchange_options& opt) {
  auto ex = std::make_unique<fabric_exchange_impl>(opt);
  if (auto st = ex->init(boot); !st) return st.err();
  return std::unique_ptr<fabric_expert_exchange>(std::move(ex));
}

}  // namespace moerl::job
