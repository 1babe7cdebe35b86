#include "job/fabric_expert_exchange.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <unordered_set>

#include "common/config.h"
#include "fabric/ep_group.h"

namespace moerl::policy {
namespace {

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

// What a handle keeps: the routing of its dispatch, enough to repeat it on either group.
struct routing {
  uint64_t id = 0;                           // the dispatch call that made it (same on every rank)
  std::vector<int64_t> expert_of_row;        // [num_send_rows] global expert of each send row
  std::vector<int64_t> local_expert_offset;  // what the dispatch received, to check repeats
};

// The routings this exchange handed out that are still alive, so that a handle from another
// exchange (say the in-process group) is refused instead of misread. Shared with the
// handles' deleters, which may run after the exchange is gone.
struct handle_registry {
  std::mutex mu;
  std::unordered_set<const void*> live;
};

// One ep_group and the step it has open. ep_group reads a step's inputs (rows, expert ids,
// weights) until its combine completes, so the group owns them for as long: the caller's
// buffers may be gone by then (a dispatch whose combine comes later, or never).
struct mode_group {
  std::unique_ptr<fabric::ep_group> g;
  exchange_mode mode = exchange_mode::normal;
  int64_t max_rows = 0;
  std::shared_ptr<const routing> open;           // routing of the dispatched, uncombined step
  std::vector<float> open_rows;                  // that step's send rows, copied
  const fabric::dispatch_output* out = nullptr;  // the group's output of that step
  // Contract row i is the group's received row order[i]; empty when the two coincide.
  std::vector<int64_t> order;
};

class fabric_exchange_impl final : public fabric_expert_exchange {
 public:
  explicit fabric_exchange_impl(const fabric_exchange_options& opt)
      : opt_(opt),
        registry_(std::make_shared<handle_registry>()),
        shuffle_rng_(opt.test_shuffle_seed) {}

  status init(fabric::bootstrap& boot) {
    if (opt_.num_experts < 1) return bad("num_experts must be >= 1");
    if (opt_.hidden < 1) return bad("hidden must be >= 1");
    if (opt_.max_rows_per_rank < 1) return bad("max_rows_per_rank must be >= 1");
    if (opt_.max_decode_rows_per_rank < 0) return bad("max_decode_rows_per_rank must be >= 0");
    const std::vector<int> members =
        opt_.members.empty() ? fabric::all_members(boot) : opt_.members;
    if (members.empty() || opt_.num_experts % static_cast<int>(members.size()) != 0)
      return bad(std::to_string(opt_.num_experts) + " experts do not split over " +
                 std::to_string(members.size()) + " ranks");
    normal_.mode = exchange_mode::normal;
    normal_.max_rows = opt_.max_rows_per_rank;
    if (auto st = create(boot, members, fabric::ep_mode::normal, normal_); !st) return st;
    if (opt_.low_latency_group) {
      low_latency_.mode = exchange_mode::low_latency;
      low_latency_.max_rows = opt_.max_decode_rows_per_rank > 0 ? opt_.max_decode_rows_per_rank
                                                                : opt_.max_rows_per_rank;
      if (auto st = create(boot, members, fabric::ep_mode::low_latency, low_latency_); !st)
        return st;
    }
    ones_.assign(static_cast<size_t>(std::max(normal_.max_rows, low_latency_.max_rows)), 1.0f);
    return ok_status();
  }

  int rank() const override { return normal_.g->rank(); }
  int num_ranks() const override { return normal_.g->num_ranks(); }
  const fabric::transport_description& describe() const override { return normal_.g->describe(); }
  int64_t reordered_dispatches() const override { return reordered_; }
  int64_t extra_steps() const override { return extra_steps_; }

  result<exchange_handle> dispatch(const float* send_rows, const int64_t* expert_offset,
                                   int num_experts, int64_t hidden, exchange_mode mode,
                                   std::vector<float>* recv_rows) override {
    if (num_experts != opt_.num_experts)
      return bad("dispatch with " + std::to_string(num_experts) +
                 " experts; the exchange was built for " + std::to_string(opt_.num_experts));
    if (auto st = check_hidden(hidden); !st) return st.err();
    if (!expert_offset || !recv_rows) return bad("dispatch: null expert_offset or recv_rows");
    if (expert_offset[0] != 0) return bad("dispatch: expert_offset[0] must be 0");
    for (int e = 0; e < num_experts; ++e)
      if (expert_offset[e + 1] < expert_offset[e])
        return bad("dispatch: expert_offset decreases at expert " + std::to_string(e));
    const int64_t rows = expert_offset[num_experts];
    if (rows > 0 && !send_rows) return bad("dispatch: null send_rows");
    mode_group& mg = group_for(mode);
    if (auto st = check_bound(mg, rows, "dispatch"); !st) return st.err();

    // Each send row is a token with topk = 1: its expert is the range that holds it.
    auto rt = make_routing();
    rt->id = ++next_id_;
    rt->expert_of_row.resize(static_cast<size_t>(rows));
    for (int e = 0; e < num_experts; ++e)
      std::fill(rt->expert_of_row.begin() + expert_offset[e],
                rt->expert_of_row.begin() + expert_offset[e + 1], e);
    if (auto st = run_dispatch(mg, rt, send_rows, "dispatch", recv_rows); !st) return st.err();
    rt->local_expert_offset = mg.out->expert_offset;

    exchange_handle h;
    h.num_send_rows = rows;
    h.num_recv_rows = mg.out->num_recv_rows;
    h.local_expert_offset = rt->local_expert_offset;
    h.impl = rt;
    return h;
  }

  status dispatch_cached(const exchange_handle& h, const float* send_rows, int64_t hidden,
                         exchange_mode mode, std::vector<float>* recv_rows) override {
    auto rt = routing_of(h, "dispatch_cached");
    if (!rt) return rt.err();
    if (auto st = check_hidden(hidden); !st) return st;
    if (!recv_rows) return bad("dispatch_cached: null recv_rows");
    if (h.num_send_rows > 0 && !send_rows) return bad("dispatch_cached: null send_rows");
    mode_group& mg = group_for(mode);
    if (auto st = check_bound(mg, h.num_send_rows, "dispatch_cached"); !st) return st;
    return run_dispatch(mg, *rt, send_rows, "dispatch_cached", recv_rows);
  }

  status combine(const exchange_handle& h, const float* recv_rows, int64_t hidden,
                 exchange_mode mode, float* send_rows) override {
    auto rt = routing_of(h, "combine");
    if (!rt) return rt.err();
    if (auto st = check_hidden(hidden); !st) return st;
    if (h.num_recv_rows > 0 && !recv_rows) return bad("combine: null recv_rows");
    if (h.num_send_rows > 0 && !send_rows) return bad("combine: null send_rows");
    mode_group& mg = group_for(mode);
    if (auto st = check_bound(mg, h.num_send_rows, "combine"); !st) return st;
    if (!mg.open || mg.open->id != (*rt)->id) {
      // The group's open step is another dispatch (or none): rebuild this handle's routing
      // state on the group with a dispatch of zeros, whose received rows are not needed.
      ++extra_steps_;
      if (auto st = run_dispatch(mg, *rt, nullptr, "combine (re-dispatch)", &unused_recv_); !st)
        return st;
    }
    // The group wants its expert outputs in its own received order.
    const float* expert_out = recv_rows;
    if (!mg.order.empty()) {
      scratch_.resize(static_cast<size_t>(h.num_recv_rows * opt_.hidden));
      for (int64_t i = 0; i < h.num_recv_rows; ++i)
        std::memcpy(scratch_.data() + mg.order[i] * opt_.hidden, recv_rows + i * opt_.hidden,
                    row_bytes());
      expert_out = scratch_.data();
    }
    auto st = mg.g->combine(*mg.out, expert_out, send_rows);
    mg.open.reset();
    if (!st) return from_fabric("combine", mg.mode, st.err());
    return ok_status();
  }

 private:
  status create(fabric::bootstrap& boot, const std::vector<int>& members, fabric::ep_mode m,
                mode_group& mg) {
    fabric::ep_config cfg;
    cfg.mode = m;
    cfg.num_experts = opt_.num_experts;
    cfg.hidden = opt_.hidden;
    cfg.topk = 1;
    cfg.max_tokens_per_rank = mg.max_rows;
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

  size_t row_bytes() const { return static_cast<size_t>(opt_.hidden) * sizeof(float); }

  status check_hidden(int64_t hidden) const {
    if (hidden != opt_.hidden)
      return bad("rows of " + std::to_string(hidden) + " floats; the exchange was built for " +
                 std::to_string(opt_.hidden));
    return ok_status();
  }

  status check_bound(const mode_group& mg, int64_t rows, const char* op) const {
    if (rows > mg.max_rows)
      return bad(std::string(op) + ": " + std::to_string(rows) + " send rows exceed the " +
                 mode_name(mg.mode) + " group's bound of " + std::to_string(mg.max_rows) +
                 " rows per rank (fabric_exchange_options::" +
                 (mg.mode == exchange_mode::low_latency && opt_.max_decode_rows_per_rank > 0
                      ? "max_decode_rows_per_rank"
                      : "max_rows_per_rank") +
                 "; size it as tokens per step x top_k)");
    return ok_status();
  }

  std::shared_ptr<routing> make_routing() {
    auto reg = registry_;
    std::shared_ptr<routing> rt(new routing, [reg](routing* p) {
      {
        std::lock_guard<std::mutex> lock(reg->mu);
        reg->live.erase(p);
      }
      delete p;
    });
    std::lock_guard<std::mutex> lock(registry_->mu);
    registry_->live.insert(rt.get());
    return rt;
  }

  result<std::shared_ptr<const routing>> routing_of(const exchange_handle& h,
                                                    const char* op) const {
    {
      std::lock_guard<std::mutex> lock(registry_->mu);
      if (!h.impl || registry_->live.count(h.impl.get()) == 0)
        return bad(std::string(op) + ": the handle does not come from this exchange's dispatch");
    }
    auto rt = std::static_pointer_cast<const routing>(h.impl);
    if (static_cast<int64_t>(rt->expert_of_row.size()) != h.num_send_rows ||
        rt->local_expert_offset.empty() || rt->local_expert_offset.back() != h.num_recv_rows)
      return bad(std::string(op) + ": the handle's row counts were changed after its dispatch");
    return rt;
  }

  // Closes the group's open step, if any, with a combine whose output nobody reads: ep_group
  // alternates dispatch and combine, and the collective contract makes every rank do this at
  // the same call.
  status close_open_step(mode_group& mg) {
    if (!mg.open) return ok_status();
    ++extra_steps_;
    zero_out_.assign(static_cast<size_t>(mg.out->num_recv_rows * opt_.hidden), 0.0f);
    discard_.resize(mg.open_rows.size());
    auto st = mg.g->combine(*mg.out, zero_out_.data(), discard_.data());
    mg.open.reset();
    if (!st) return from_fabric("closing combine", mg.mode, st.err());
    return ok_status();
  }

  // Moves `send_rows` along `rt` on the group and writes the received rows in the
  // contract's order; leaves the step open for the combine.
  // send_rows nullptr: zeros.
  status run_dispatch(mode_group& mg, const std::shared_ptr<const routing>& rtp,
                      const float* send_rows, const char* op, std::vector<float>* recv_rows) {
    if (auto st = close_open_step(mg); !st) return st;
    const routing& rt = *rtp;
    const int64_t rows = static_cast<int64_t>(rt.expert_of_row.size());
    const size_t n_floats = static_cast<size_t>(rows * opt_.hidden);
    if (send_rows)
      mg.open_rows.assign(send_rows, send_rows + n_floats);
    else
      mg.open_rows.assign(n_floats, 0.0f);
    mg.open = rtp;
    auto d = mg.g->dispatch(mg.open_rows.data(), rt.expert_of_row.data(), ones_.data(), rows);
    if (!d) return from_fabric(op, mg.mode, d.err());
    mg.out = *d;
    const fabric::dispatch_output& out = **d;
    if (!rt.local_expert_offset.empty() && out.expert_offset != rt.local_expert_offset)
      return error{errc::internal, std::string("fabric expert exchange: ") + op +
                                       ": the repeated dispatch received other per-expert "
                                       "counts than the handle's (a rank broke the collective "
                                       "contract)"};
    if (auto st = contract_order(out, mg.order); !st) return st;
    const int64_t n = out.num_recv_rows;
    recv_rows->resize(static_cast<size_t>(n * opt_.hidden));
    const auto* src = static_cast<const float*>(out.recv_x);
    if (mg.order.empty()) {
      if (n > 0) std::memcpy(recv_rows->data(), src, static_cast<size_t>(n) * row_bytes());
    } else {
      ++reordered_;
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(recv_rows->data() + i * opt_.hidden, src + mg.order[i] * opt_.hidden,
                    row_bytes());
    }
    return ok_status();
  }

  // The contract orders each local expert's rows by (source rank, source send row); the
  // group's attribution says where each row came from. Fills `order` (contract row i is the
  // group's row order[i]) when the rows as presented are not in that order, else leaves it
  // empty. Presented order: the group's, or with test_shuffle_seed shuffled inside each
  // expert, as a group that delivered another order would present them.
  status contract_order(const fabric::dispatch_output& out, std::vector<int64_t>& order) {
    const int64_t n = out.num_recv_rows;
    const std::vector<int64_t>& off = out.expert_offset;
    if (static_cast<int64_t>(out.src_rank.size()) != n ||
        static_cast<int64_t>(out.src_token.size()) != n || off.empty() || off.back() != n)
      return error{errc::internal,
                   "fabric expert exchange: the group's attribution does not "
                   "cover its received rows"};
    order.resize(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    if (opt_.test_shuffle_seed != 0)
      for (size_t j = 0; j + 1 < off.size(); ++j)
        std::shuffle(order.begin() + off[j], order.begin() + off[j + 1], shuffle_rng_);
    auto before = [&](int64_t a, int64_t b) {
      return out.src_rank[a] != out.src_rank[b] ? out.src_rank[a] < out.src_rank[b]
                                                : out.src_token[a] < out.src_token[b];
    };
    bool sorted = true;
    for (size_t j = 0; j + 1 < off.size() && sorted; ++j)
      for (int64_t r = off[j] + 1; r < off[j + 1] && sorted; ++r)
        sorted = before(order[r - 1], order[r]);
    if (!sorted) {
      // With topk = 1 a (source rank, source row) pair names one row: the sort is unique.
      for (size_t j = 0; j + 1 < off.size(); ++j)
        std::sort(order.begin() + off[j], order.begin() + off[j + 1], before);
      for (size_t j = 0; j + 1 < off.size(); ++j)
        for (int64_t r = off[j] + 1; r < off[j + 1]; ++r)
          if (!before(order[r - 1], order[r]))
            return error{errc::internal,
                         "fabric expert exchange: the group delivered two rows "
                         "attributed to the same source row"};
    }
    // Rows presented in the contract's order are copied as they are. (A sorted shuffle maps
    // back onto the group's own rows, so after a test shuffle `order` holds the identity —
    // found by the sort — and the permuted copies below run with it.)
    if (sorted) order.clear();
    return ok_status();
  }

  fabric_exchange_options opt_;
  std::shared_ptr<handle_registry> registry_;
  mode_group normal_, low_latency_;
  uint64_t next_id_ = 0;
  std::mt19937_64 shuffle_rng_;  // test_shuffle_seed's sequence
  std::vector<float> ones_;      // the routing weight of every row
  // Scratch: expert outputs in the group's order, a closing combine's zero outputs and
  // discarded result, a re-dispatch's unneeded received rows.
  std::vector<float> scratch_, zero_out_, discard_, unused_recv_;
  int64_t reordered_ = 0, extra_steps_ = 0;
};

}  // namespace

int64_t fabric_exchange_rows_bound(int64_t max_tokens_per_rank, int top_k) {
  return max_tokens_per_rank * top_k;
}

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
  const int top_k = static_cast<int>(cfg.get_int("policy.top_k"));
  const int64_t train = fabric_exchange_rows_bound(max_train_tokens, top_k);
  const int64_t decode = fabric_exchange_rows_bound(max_decode_sequences, top_k);
  o.max_rows_per_rank = train > 0 ? train : decode;
  o.max_decode_rows_per_rank = decode > 0 ? decode : train;
  return o;
}

result<std::unique_ptr<fabric_expert_exchange>> make_fabric_expert_exchange(
    fabric::bootstrap& boot, const fabric_exchange_options& opt) {
  auto ex = std::make_unique<fabric_exchange_impl>(opt);
  if (auto st = ex->init(boot); !st) return st.err();
  return std::unique_ptr<fabric_expert_exchange>(std::move(ex));
}

}  // namespace moerl::policy
