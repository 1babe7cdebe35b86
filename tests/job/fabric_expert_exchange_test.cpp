// The fabric-backed expert exchange moves exactly what the in-process reference group moves:
// the same received rows in the same order with the same weights, bit for bit, and the same
// combined rows and gradients (bit for bit where nothing is summed) - for 2 and 4 ranks as
// threads over shm and tcp, with and without fabric's reorder shim, through forward and
// backward steps, decode steps on the low-latency group, handles used on the other group, a
// rank with no tokens, unused top-k slots, an expert nobody routes to, and with ranks as
// processes. A policy forward + backward and a rollout through it equal the reference's bit
// for bit (top-2: two terms add the same in any order). Bad input (shapes, over-bound
// steps, foreign handles, calls out of step) is an error naming the problem.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "common/config.h"
#include "fabric/bootstrap.h"
#include "job/fabric_expert_exchange.h"
#include "policy/trainer.h"
#include "tests/support/tiny_model.h"

namespace moerl::job {
namespace {

using fabric::bootstrap;
using policy::exchange_handle;
using policy::exchange_mode;
using policy::expert_exchange;
using policy::forward_state;
using policy::make_inprocess_expert_group;
using policy::make_local_expert_exchange;
using policy::make_sort_task;
using policy::model_config;
using policy::moe_policy;
using policy::num_vocab;
using policy::sample;
using policy::token_id;

// ---- scripted exchange calls ------------------------------------------------------------

enum class op_kind { dispatch, combine, cached, backward };
struct op {
  op_kind kind;
  int handle;  // which handle slot the op makes or uses
  exchange_mode mode;
};

constexpr int num_experts = 8;
constexpr int64_t hidden = 40;
constexpr int top_k = 3;  // three experts a token: two of them often on one rank
constexpr int64_t max_tokens = 12;
constexpr int empty_expert = 1;  // no rank ever routes a token here

const exchange_mode N = exchange_mode::normal, LL = exchange_mode::low_latency;

// What a model's steps do: forwards (dispatch + combine) on both groups, backwards
// (dispatch_cached + dispatch_backward) of old handles and of a handle from the other group.
// More than 16 steps per group, so fabric's 4-bit step field wraps inside one script.
std::vector<op> script() {
  std::vector<op> s;
  auto forward = [&](int h, exchange_mode m) {
    s.push_back({op_kind::dispatch, h, m});
    s.push_back({op_kind::combine, h, m});
  };
  auto backward = [&](int h, exchange_mode m) {
    s.push_back({op_kind::cached, h, m});
    s.push_back({op_kind::backward, h, m});
  };
  for (int round = 0; round < 5; ++round) {
    const int h = 4 * round;
    forward(h, N);       // layer 0
    forward(h + 1, N);   // layer 1
    backward(h + 1, N);  // backward, layer 1
    backward(h, N);      // backward, layer 0 (the older handle)
    forward(h + 2, LL);  // decode steps
    forward(h + 3, LL);
    backward(h + 3, N);   // a low-latency handle's backward on the normal group
    backward(h + 1, LL);  // and a normal one's on the low-latency group
  }
  return s;
}

constexpr int num_handles = 20;

uint64_t input_seed(int rank, size_t op_index) { return 7919u * (rank + 1) + 104729u * op_index; }

// `n` values; never an empty vector, so that no exchange sees a null buffer.
std::vector<float> random_floats(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> v(static_cast<size_t>(std::max<int64_t>(n, 1)));
  for (auto& x : v) x = u(rng);
  return v;
}

// One rank's tokens for the dispatch at `op_index`: up to max_tokens, each to top_k distinct
// experts (never empty_expert), about one slot in six unused (-1); every third dispatch the
// last rank sends nothing (a decode step where all its sequences finished).
struct tokens {
  int64_t n = 0;
  std::vector<float> x, weights;
  std::vector<int64_t> idx;
};
tokens random_tokens(int rank, int num_ranks, size_t op_index) {
  std::mt19937_64 rng(input_seed(rank, op_index) + 1);
  tokens t;
  const bool silent = rank == num_ranks - 1 && op_index % 3 == 0;
  t.n = silent ? 0 : std::uniform_int_distribution<int64_t>(1, max_tokens)(rng);
  t.x = random_floats(t.n * hidden, input_seed(rank, op_index));
  t.weights = random_floats(t.n * top_k, input_seed(rank, op_index) + 2);
  std::vector<int> experts;
  for (int e = 0; e < num_experts; ++e)
    if (e != empty_expert) experts.push_back(e);
  t.idx.resize(static_cast<size_t>(std::max<int64_t>(t.n * top_k, 1)));
  for (int64_t i = 0; i < t.n; ++i) {
    std::shuffle(experts.begin(), experts.end(), rng);
    for (int k = 0; k < top_k; ++k) t.idx[i * top_k + k] = rng() % 6 == 0 ? -1 : experts[k];
  }
  return t;
}

// What one rank saw. Received rows and everything else that is copied, not summed, must
// match bit for bit; sums over a token's top_k terms may be added in another order (the
// exchange contract), so they are compared with a tolerance.
struct trace {
  std::vector<std::vector<float>> exact;   // received rows, recv weights, weight gradients
  std::vector<std::vector<float>> summed;  // combine's y, dispatch_backward's grad_x
  std::vector<std::vector<int64_t>> offsets;
};

status run_script(expert_exchange& ex, trace* out) {
  const auto ops = script();
  std::vector<exchange_handle> h(num_handles);
  for (size_t i = 0; i < ops.size(); ++i) {
    const op& o = ops[i];
    const uint64_t seed = input_seed(ex.rank(), i);
    exchange_handle& hd = h[o.handle];
    std::vector<float> got;
    got.reserve(1);  // data() stays non-null when an exchange resizes it to zero rows
    if (o.kind == op_kind::dispatch) {
      auto t = random_tokens(ex.rank(), ex.num_ranks(), i);
      auto r = ex.dispatch(t.x.data(), t.idx.data(), t.weights.data(), t.n, top_k, num_experts,
                           hidden, o.mode, &got);
      if (!r) return r.err();
      hd = *r;
      out->offsets.push_back(hd.local_expert_offset);
      out->exact.push_back(std::move(got));
      out->exact.push_back(hd.recv_weights);
    } else if (o.kind == op_kind::cached) {
      auto x = random_floats(hd.num_tokens * hidden, seed);
      if (auto st = ex.dispatch_cached(hd, x.data(), hidden, o.mode, &got); !st) return st;
      out->exact.push_back(std::move(got));
    } else if (o.kind == op_kind::combine) {
      auto rows = random_floats(hd.num_recv_rows * hidden, seed);
      got.assign(static_cast<size_t>(std::max<int64_t>(hd.num_tokens * hidden, 1)), -1.0f);
      if (auto st = ex.combine(hd, rows.data(), hidden, o.mode, got.data()); !st) return st;
      got.resize(static_cast<size_t>(hd.num_tokens * hidden));
      out->summed.push_back(std::move(got));
    } else {
      auto rows = random_floats(hd.num_recv_rows * hidden, seed);
      auto scalars = random_floats(hd.num_recv_rows, seed + 1);
      got.assign(static_cast<size_t>(std::max<int64_t>(hd.num_tokens * hidden, 1)), -1.0f);
      std::vector<float> gw(static_cast<size_t>(std::max<int64_t>(hd.num_tokens * top_k, 1)),
                            -1.0f);
      if (auto st = ex.dispatch_backward(hd, rows.data(), scalars.data(), hidden, o.mode,
                                         got.data(), gw.data());
          !st)
        return st;
      got.resize(static_cast<size_t>(hd.num_tokens * hidden));
      gw.resize(static_cast<size_t>(hd.num_tokens * top_k));
      out->summed.push_back(std::move(got));
      out->exact.push_back(std::move(gw));
    }
  }
  return ok_status();
}

// Empty when equal, else what differs first.
std::string compare(const trace& got, const trace& want) {
  if (got.offsets != want.offsets) return "local expert offsets differ";
  if (got.exact.size() != want.exact.size() || got.summed.size() != want.summed.size())
    return "number of outputs differs";
  for (size_t i = 0; i < want.exact.size(); ++i) {
    if (got.exact[i].size() != want.exact[i].size())
      return "exact output " + std::to_string(i) + ": " + std::to_string(got.exact[i].size()) +
             " floats, want " + std::to_string(want.exact[i].size());
    if (!want.exact[i].empty() && std::memcmp(got.exact[i].data(), want.exact[i].data(),
                                              want.exact[i].size() * sizeof(float)) != 0)
      return "exact output " + std::to_string(i) + " differs bitwise";
  }
  for (size_t i = 0; i < want.summed.size(); ++i) {
    if (got.summed[i].size() != want.summed[i].size())
      return "summed output " + std::to_string(i) + ": " + std::to_string(got.summed[i].size()) +
             " floats, want " + std::to_string(want.summed[i].size());
    for (size_t j = 0; j < want.summed[i].size(); ++j)
      if (std::fabs(got.summed[i][j] - want.summed[i][j]) >
          1e-5f * (1.0f + std::fabs(want.summed[i][j])))
        return "summed output " + std::to_string(i) + " differs at " + std::to_string(j) + ": " +
               std::to_string(got.summed[i][j]) + ", want " + std::to_string(want.summed[i][j]);
  }
  return "";
}

// The reference: the in-process group, one thread per rank.
std::vector<trace> reference_traces(int num_ranks) {
  auto group = make_inprocess_expert_group(num_ranks);
  std::vector<trace> out(num_ranks);
  std::vector<status> st(num_ranks);
  std::vector<std::thread> th;
  for (int r = 0; r < num_ranks; ++r)
    th.emplace_back([&, r] { st[r] = run_script(*group[r], &out[r]); });
  for (auto& t : th) t.join();
  for (int r = 0; r < num_ranks; ++r) EXPECT_TRUE(st[r].ok()) << st[r].err().to_string();
  return out;
}

TEST(inprocess_group, a_combine_of_the_received_rows_is_the_weighted_sum_of_the_tokens) {
  // The reference itself, against the definition: with every expert the identity, combine
  // returns sum_k w[t,k] * x[t] over the used slots, and dispatch_backward returns each
  // row's scalar to its slot.
  const int R = 2;
  auto group = make_inprocess_expert_group(R);
  std::vector<std::string> failures(R);
  std::vector<std::thread> th;
  for (int r = 0; r < R; ++r)
    th.emplace_back([&, r] {
      auto t = random_tokens(r, R, 1);
      std::vector<float> recv;
      auto h = group[r]->dispatch(t.x.data(), t.idx.data(), t.weights.data(), t.n, top_k,
                                  num_experts, hidden, N, &recv);
      if (!h) {
        failures[r] = h.err().to_string();
        return;
      }
      std::vector<float> y(static_cast<size_t>(std::max<int64_t>(t.n * hidden, 1)));
      if (auto st = group[r]->combine(*h, recv.data(), hidden, N, y.data()); !st) {
        failures[r] = st.err().to_string();
        return;
      }
      for (int64_t i = 0; i < t.n; ++i)
        for (int64_t c = 0; c < hidden; ++c) {
          float want = 0;
          for (int k = 0; k < top_k; ++k)
            if (t.idx[i * top_k + k] >= 0) want += t.weights[i * top_k + k] * t.x[i * hidden + c];
          if (std::fabs(y[i * hidden + c] - want) > 1e-5f * (1 + std::fabs(want)))
            failures[r] = "token " + std::to_string(i) + " is not its weighted sum";
        }
      // Each row's scalar: its own weight, which must come back to the slot it left.
      std::vector<float> dx(y.size()), gw(static_cast<size_t>(std::max<int64_t>(t.n * top_k, 1)));
      std::vector<float> cached;
      if (auto st = group[r]->dispatch_cached(*h, t.x.data(), hidden, N, &cached); !st) {
        failures[r] = st.err().to_string();
        return;
      }
      if (cached != recv) failures[r] = "dispatch_cached moved other rows than dispatch";
      if (auto st = group[r]->dispatch_backward(*h, recv.data(), h->recv_weights.data(), hidden, N,
                                                dx.data(), gw.data());
          !st) {
        failures[r] = st.err().to_string();
        return;
      }
      for (int64_t i = 0; i < t.n * top_k; ++i)
        if (gw[i] != (t.idx[i] >= 0 ? t.weights[i] : 0.0f))
          failures[r] = "slot " + std::to_string(i) + " got another row's scalar";
    });
  for (auto& x : th) x.join();
  for (int r = 0; r < R; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
}

fabric_exchange_options options(const std::string& provider, bool shim, int rank,
                                int ranks_per_node = 0) {
  fabric_exchange_options o;
  o.transport.provider = provider;
  o.transport.require_provider = true;
  o.transport.reorder_shim = shim;
  o.transport.shim_seed = 77 + static_cast<uint64_t>(rank);
  o.num_experts = num_experts;
  o.hidden = hidden;
  o.top_k = top_k;
  o.max_tokens_per_rank = max_tokens;
  o.chunk_bytes = 4096;  // the smallest chunk: several writes per peer, room to reorder
  o.op_timeout_ms = 20000;
  o.ranks_per_node = ranks_per_node;
  return o;
}

int fail(int rank, const std::string& what) {
  std::fprintf(stderr, "rank %d: %s\n", rank, what.c_str());
  return 1;
}

// A rank of a fabric group: run the script, compare with the reference, wait for the others.
int script_rank(bootstrap& b, const std::string& provider, bool shim, int ranks_per_node,
                const std::vector<trace>& want) {
  auto ex = make_fabric_expert_exchange(b, options(provider, shim, b.rank(), ranks_per_node));
  if (!ex) return fail(b.rank(), "create: " + ex.err().to_string());
  trace got;
  if (auto st = run_script(**ex, &got); !st) return fail(b.rank(), st.err().to_string());
  if (auto diff = compare(got, want[b.rank()]); !diff.empty()) return fail(b.rank(), diff);
  // Peers may still wait on this rank's last writes: leave together.
  if (auto done = b.allgather(fabric::all_members(b), "", 20000); !done)
    return fail(b.rank(), "final barrier: " + done.err().to_string());
  return 0;
}

struct combo {
  std::string provider;
  bool shim;
  int ranks;
  int ranks_per_node = 0;  // > 0: the normal group's two-level (node gateway) path
};

class fabric_exchange_threads : public ::testing::TestWithParam<combo> {};

TEST_P(fabric_exchange_threads, rows_equal_the_in_process_group) {
  const combo& c = GetParam();
  const auto want = reference_traces(c.ranks);
  auto report = fabric::launch_threads(c.ranks, [&](bootstrap& b) {
    return script_rank(b, c.provider, c.shim, c.ranks_per_node, want);
  });
  for (size_t r = 0; r < report.exit_codes.size(); ++r)
    EXPECT_EQ(report.exit_codes[r], 0) << "rank " << r;
}

std::string combo_name(const ::testing::TestParamInfo<combo>& info) {
  return (info.param.provider == "shm" ? std::string("shm") : std::string("tcp")) +
         (info.param.shim ? "_shim_" : "_") + std::to_string(info.param.ranks) + "ranks" +
         (info.param.ranks_per_node > 0
              ? "_" + std::to_string(info.param.ranks_per_node) + "per_node"
              : "");
}

INSTANTIATE_TEST_SUITE_P(providers, fabric_exchange_threads,
                         ::testing::Values(combo{"shm", false, 2}, combo{"shm", true, 2},
                                           combo{"shm", false, 4}, combo{"shm", true, 4},
                                           combo{"tcp", false, 2}, combo{"tcp", true, 2},
                                           combo{"tcp", false, 4}, combo{"tcp", true, 4},
                                           combo{"shm", true, 4, 2}),
                         combo_name);

class fabric_exchange_processes : public ::testing::TestWithParam<combo> {};

TEST_P(fabric_exchange_processes, ranks_as_processes_equal_the_in_process_group) {
  const combo& c = GetParam();
  const auto want = reference_traces(c.ranks);  // its threads are joined before the fork
  auto report = fabric::launch_processes(
      c.ranks,
      [&](bootstrap& b) { return script_rank(b, c.provider, c.shim, c.ranks_per_node, want); },
      60000);
  ASSERT_TRUE(report.ok()) << report.err().to_string();
  for (size_t r = 0; r < report->exit_codes.size(); ++r)
    EXPECT_EQ(report->exit_codes[r], 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(providers, fabric_exchange_processes,
                         ::testing::Values(combo{"shm", true, 2}, combo{"tcp", true, 4}),
                         combo_name);

// ---- bad input --------------------------------------------------------------------------

bool says(const status& st, const std::string& what) {
  return !st.ok() && st.err().code == errc::invalid_argument &&
         st.err().message.find(what) != std::string::npos;
}
template <class T>
bool says(const result<T>& r, const std::string& what) {
  return !r.ok() && r.err().code == errc::invalid_argument &&
         r.err().message.find(what) != std::string::npos;
}

TEST(fabric_exchange_errors, experts_that_do_not_split_over_the_ranks_are_refused) {
  auto report = fabric::launch_threads(2, [&](bootstrap& b) {
    auto o = options("shm", false, b.rank());
    o.num_experts = 3;
    o.top_k = 2;
    return says(make_fabric_expert_exchange(b, o), "3 experts do not split over 2 ranks") ? 0 : 1;
  });
  for (int code : report.exit_codes) EXPECT_EQ(code, 0);
}

TEST(fabric_exchange_errors, bad_calls_are_refused_and_the_exchange_keeps_working) {
  auto report = fabric::launch_threads(2, [&](bootstrap& b) {
    auto o = options("shm", false, b.rank());
    o.max_decode_tokens_per_rank = 3;
    auto ex = make_fabric_expert_exchange(b, o);
    if (!ex) return fail(b.rank(), ex.err().to_string());
    expert_exchange& x = **ex;
    std::vector<float> recv;
    // Tokens over the normal bound, and over the decode bound: refused before the fabric.
    auto big = random_tokens(0, 2, 1);
    big.n = max_tokens + 1;
    big.x = random_floats(big.n * hidden, 1);
    big.weights.assign(static_cast<size_t>(big.n * top_k), 0.5f);
    big.idx.assign(static_cast<size_t>(big.n * top_k), -1);
    for (int64_t i = 0; i < big.n; ++i) big.idx[i * top_k] = 0;  // every token to expert 0
    auto d = [&](int64_t n, int k, int e, int64_t hid, exchange_mode m) {
      return x.dispatch(big.x.data(), big.idx.data(), big.weights.data(), n, k, e, hid, m, &recv);
    };
    if (!says(d(max_tokens + 1, top_k, num_experts, hidden, N), "max_tokens_per_rank"))
      return fail(b.rank(), "over-bound dispatch not refused");
    if (!says(d(4, top_k, num_experts, hidden, LL), "max_decode_tokens_per_rank"))
      return fail(b.rank(), "over-bound decode dispatch not refused");
    // Shapes other than the exchange's.
    if (!says(d(3, top_k, num_experts, hidden + 1, N), "floats"))
      return fail(b.rank(), "wrong hidden not refused");
    if (!says(d(3, top_k, num_experts - 2, hidden, N), "experts"))
      return fail(b.rank(), "wrong num_experts not refused");
    if (!says(d(3, top_k - 1, num_experts, hidden, N), "top_k"))
      return fail(b.rank(), "wrong top_k not refused");
    // A handle another exchange made.
    auto local = make_local_expert_exchange();
    auto foreign = local->dispatch(big.x.data(), big.idx.data(), big.weights.data(), 3, top_k,
                                   num_experts, hidden, N, &recv);
    if (!foreign) return fail(b.rank(), foreign.err().to_string());
    std::vector<float> y(static_cast<size_t>(max_tokens * hidden));
    if (!says(x.combine(*foreign, recv.data(), hidden, N, y.data()), "does not come from"))
      return fail(b.rank(), "foreign handle not refused");
    // A handle whose counts were edited after its dispatch.
    auto h = d(3, top_k, num_experts, hidden, N);
    if (!h) return fail(b.rank(), h.err().to_string());
    exchange_handle copy = *h;
    copy.num_recv_rows += 1;
    if (!says(x.combine(copy, recv.data(), hidden, N, y.data()), "row counts were changed"))
      return fail(b.rank(), "edited handle not refused");
    // Out of step: another dispatch while this one awaits its combine, and the combine's
    // other half.
    if (!says(d(3, top_k, num_experts, hidden, N), "still open"))
      return fail(b.rank(), "a second open dispatch not refused");
    std::vector<float> gw(static_cast<size_t>(max_tokens * top_k));
    if (!says(x.dispatch_backward(*h, recv.data(), h->recv_weights.data(), hidden, N, y.data(),
                                  gw.data()),
              "open step"))
      return fail(b.rank(), "dispatch_backward of a forward step not refused");
    // Nothing refused above reached the fabric: the step completes. Every token went to
    // expert 0 on rank 0 with weight 0.5, so an identity expert returns half of each token.
    if (h->num_recv_rows != (b.rank() == 0 ? 6 : 0)) return fail(b.rank(), "wrong received rows");
    if (auto st = x.combine(*h, recv.data(), hidden, N, y.data()); !st)
      return fail(b.rank(), st.err().to_string());
    for (int64_t i = 0; i < 3 * hidden; ++i)
      if (y[i] != 0.5f * big.x[i]) return fail(b.rank(), "rows did not come back weighted");
    if (!says(x.combine(*h, recv.data(), hidden, N, y.data()), "open step"))
      return fail(b.rank(), "a second combine of one step not refused");
    if (auto done = b.allgather(fabric::all_members(b), "", 20000); !done) return 1;
    return 0;
  });
  for (int code : report.exit_codes) EXPECT_EQ(code, 0);
}

TEST(fabric_exchange_errors, a_rank_over_its_bound_fails_fast_and_its_peers_time_out_naming_it) {
  auto report = fabric::launch_threads(2, [&](bootstrap& b) {
    auto o = options("shm", false, b.rank());
    o.op_timeout_ms = 1500;
    auto ex = make_fabric_expert_exchange(b, o);
    if (!ex) return fail(b.rank(), ex.err().to_string());
    // Rank 0 has one token too many for the normal group; rank 1 a legal step.
    const int64_t n = b.rank() == 0 ? max_tokens + 1 : 3;
    auto x = random_floats(n * hidden, 2);
    std::vector<float> w(static_cast<size_t>(n * top_k), 1.0f);
    std::vector<int64_t> idx(static_cast<size_t>(n * top_k));
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(i % top_k);
    std::vector<float> recv;
    auto h =
        (*ex)->dispatch(x.data(), idx.data(), w.data(), n, top_k, num_experts, hidden, N, &recv);
    int rc = 0;
    if (b.rank() == 0) {
      if (!says(h, "exceed the normal group's bound")) rc = fail(0, "over-bound step not refused");
    } else if (h.ok() || h.err().code != errc::timeout ||
               (h.err().message.find("rank 0") == std::string::npos &&
                h.err().message.find("peer 0") == std::string::npos)) {
      // The peer never showed up: an error within op_timeout_ms naming it, not a hang.
      rc = fail(1, h.ok() ? "dispatch succeeded without its peer" : h.err().to_string());
    }
    // The teardown rule: rank 1 may still be writing into rank 0's buffers until it gives up.
    if (auto done = b.allgather(fabric::all_members(b), "", 20000); !done) return 1;
    return rc;
  });
  for (int code : report.exit_codes) EXPECT_EQ(code, 0);
}

TEST(fabric_exchange_options, bounds_come_from_the_role_and_the_shape_from_the_config) {
  auto cfg = config::load("", {"policy.num_experts=8", "policy.d_model=32", "policy.top_k=3",
                               "fabric.provider=tcp", "fabric.op_timeout_ms=1234"});
  ASSERT_TRUE(cfg.ok()) << cfg.err().to_string();
  auto o = fabric_exchange_options_from_config(*cfg, 100, 7);
  ASSERT_TRUE(o.ok()) << o.err().to_string();
  EXPECT_EQ(o->num_experts, 8);
  EXPECT_EQ(o->hidden, 32);
  EXPECT_EQ(o->top_k, 3);
  EXPECT_EQ(o->max_tokens_per_rank, 100);
  EXPECT_EQ(o->max_decode_tokens_per_rank, 7);
  EXPECT_EQ(o->op_timeout_ms, 1234);
  auto decode_only = fabric_exchange_options_from_config(*cfg, 0, 7);
  ASSERT_TRUE(decode_only.ok());
  EXPECT_EQ(decode_only->max_tokens_per_rank, 7);
  EXPECT_TRUE(says(fabric_exchange_options_from_config(*cfg, 0, 0), "not both 0"));
  EXPECT_TRUE(says(fabric_exchange_options_from_config(*cfg, -1, 4), "must be >= 0"));
}

// ---- the policy over the fabric exchange -------------------------------------------------

model_config policy_config() {
  model_config c = ::moerl::testing::tiny_model(/*seed=*/5, /*max_seq_len=*/12);
  c.aux_loss_coef = 0.01f;
  return c;
}

// What one rank of a policy run produced.
struct policy_run {
  std::vector<float> logits, grads;
  std::vector<sample> samples;
  std::string error;
};

// Rank r: the policy (weights moved off the near-uniform start, the same way on every rank
// and in every run), a forward + backward on the rank's own batch, then a rollout.
policy_run run_policy(expert_exchange& ex) {
  policy_run out;
  auto p = moe_policy::create(policy_config(), ex);
  if (!p) {
    out.error = p.err().to_string();
    return out;
  }
  moe_policy& pol = **p;
  std::mt19937_64 rng(8);
  std::normal_distribution<float> nd(0.0f, 0.2f);
  for (auto& x : pol.params()) x += nd(rng);
  std::mt19937_64 data(31 + ex.rank());
  const int64_t b = 3, t = 7;
  std::uniform_int_distribution<int> tokd(1, num_vocab - 1);
  std::vector<token_id> tok(b * t);
  for (auto& x : tok) x = tokd(data);
  std::vector<float> dl(b * t * num_vocab);
  for (auto& x : dl) x = nd(data);
  forward_state st;
  if (auto s = pol.forward(tok, b, t, &st); !s) {
    out.error = "forward: " + s.err().to_string();
    return out;
  }
  if (auto s = pol.backward(st, dl, &out.grads); !s) {
    out.error = "backward: " + s.err().to_string();
    return out;
  }
  out.logits = st.logits;
  auto task = make_sort_task(3);
  std::mt19937_64 draw(100 + ex.rank());
  auto samples = rollout(pol, *task, 3, 2, 1.0f, draw, 0, 0);
  if (!samples) {
    out.error = "rollout: " + samples.err().to_string();
    return out;
  }
  out.samples = std::move(*samples);
  return out;
}

void expect_same_run(const policy_run& got, const policy_run& want, int rank) {
  ASSERT_TRUE(got.error.empty()) << "rank " << rank << ": " << got.error;
  ASSERT_TRUE(want.error.empty()) << "reference rank " << rank << ": " << want.error;
  ASSERT_EQ(got.logits.size(), want.logits.size());
  EXPECT_EQ(std::memcmp(got.logits.data(), want.logits.data(), want.logits.size() * sizeof(float)),
            0)
      << "logits of rank " << rank;
  ASSERT_EQ(got.grads.size(), want.grads.size());
  EXPECT_EQ(std::memcmp(got.grads.data(), want.grads.data(), want.grads.size() * sizeof(float)), 0)
      << "gradients of rank " << rank;
  ASSERT_EQ(got.samples.size(), want.samples.size());
  for (size_t i = 0; i < want.samples.size(); ++i) {
    EXPECT_EQ(got.samples[i].completion, want.samples[i].completion) << rank << "/" << i;
    EXPECT_EQ(got.samples[i].behaviour_logprobs, want.samples[i].behaviour_logprobs)
        << rank << "/" << i;
  }
}

class fabric_exchange_policy : public ::testing::TestWithParam<combo> {};

TEST_P(fabric_exchange_policy, forward_backward_and_rollout_equal_the_in_process_group) {
  const combo& c = GetParam();
  std::vector<policy_run> want(c.ranks), got(c.ranks);
  {
    auto group = make_inprocess_expert_group(c.ranks);
    std::vector<std::thread> th;
    for (int r = 0; r < c.ranks; ++r) th.emplace_back([&, r] { want[r] = run_policy(*group[r]); });
    for (auto& t : th) t.join();
  }
  auto report = fabric::launch_threads(c.ranks, [&](bootstrap& b) {
    // As a node builds it: from its config, with the tightest bounds for what run_policy
    // does (a training forward of 3 x 7 tokens, generate over 3 prompts x 2 samples).
    const model_config m = policy_config();
    auto cfg = config::load(
        "", {"fabric.provider=" + c.provider, "fabric.require_provider=true",
             std::string("fabric.reorder_shim=") + (c.shim ? "true" : "false"),
             "fabric.op_timeout_ms=20000", "policy.d_model=" + std::to_string(m.d_model),
             "policy.num_experts=" + std::to_string(m.num_experts),
             "policy.top_k=" + std::to_string(m.top_k)});
    if (!cfg) return fail(b.rank(), cfg.err().to_string());
    auto o = fabric_exchange_options_from_config(*cfg, 3 * 7, 3 * 2);
    if (!o) return fail(b.rank(), o.err().to_string());
    o->transport.shim_seed = 77 + static_cast<uint64_t>(b.rank());
    o->ranks_per_node = c.ranks_per_node;
    auto ex = make_fabric_expert_exchange(b, *o);
    if (!ex) return fail(b.rank(), ex.err().to_string());
    got[b.rank()] = run_policy(**ex);
    if (auto done = b.allgather(fabric::all_members(b), "", 20000); !done) return 1;
    return got[b.rank()].error.empty() ? 0 : 1;
  });
  for (int r = 0; r < c.ranks; ++r) {
    EXPECT_EQ(report.exit_codes[r], 0) << "rank " << r;
    expect_same_run(got[r], want[r], r);
  }
}

INSTANTIATE_TEST_SUITE_P(providers, fabric_exchange_policy,
                         ::testing::Values(combo{"shm", true, 2}, combo{"shm", false, 4},
                                           combo{"tcp", true, 4}, combo{"shm", true, 4, 2},
                                           combo{"tcp", true, 4, 2}),
                         combo_name);

}  // namespace
}  // namespace moerl::job
