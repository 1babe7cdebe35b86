// The fabric-backed expert exchange moves exactly what the in-process reference group moves:
// the same received rows in the same order, the same combined rows, bit for bit — for 2 and
// 4 ranks as threads over shm and tcp, with and without fabric's reorder shim, through
// forward/backward-like call sequences, decode steps on the low-latency group, a rank with no
// rows, an expert nobody routes to, calls out of dispatch/combine lockstep, and with ranks as
// processes. A policy forward + backward and a rollout through it equal the reference's.
// Bad input (shapes, over-bound steps, foreign handles) is an error naming the problem.
#include <gtest/gtest.h>

#include <algorithm>
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

namespace moerl::policy {
namespace {

using fabric::bootstrap;

// ---- scripted exchange calls ------------------------------------------------------------

enum class op_kind { dispatch, cached, combine };
struct op {
  op_kind kind;
  int handle;  // which handle slot the op makes or uses
  exchange_mode mode;
};

constexpr int num_experts = 8;
constexpr int64_t hidden = 40;
constexpr int max_per_expert = 5;
constexpr int64_t max_rows = num_experts * max_per_expert;
constexpr int empty_expert = 1;  // no rank ever routes a row here

const exchange_mode N = exchange_mode::normal, LL = exchange_mode::low_latency;

// What a model's steps do, in and out of dispatch/combine lockstep. More than 16 group
// steps, so fabric's 4-bit step field wraps inside one script.
std::vector<op> script() {
  return {
      {op_kind::dispatch, 0, N},  {op_kind::combine, 0, N},   // forward, layer 0
      {op_kind::dispatch, 1, N},  {op_kind::combine, 1, N},   // forward, layer 1
      {op_kind::cached, 1, N},    {op_kind::combine, 1, N},   // backward, layer 1
      {op_kind::cached, 0, N},    {op_kind::combine, 0, N},   // backward, layer 0 (old handle)
      {op_kind::dispatch, 2, LL}, {op_kind::combine, 2, LL},  // decode steps
      {op_kind::dispatch, 3, LL}, {op_kind::combine, 3, LL}, {op_kind::dispatch, 4, N},
      {op_kind::dispatch, 5, N},                              // two dispatches, then
      {op_kind::combine, 4, N},   {op_kind::combine, 5, N},   // their combines
      {op_kind::cached, 4, LL},   {op_kind::combine, 4, LL},  // a handle on the other group
      {op_kind::dispatch, 6, LL}, {op_kind::cached, 6, LL},  {op_kind::combine, 6, LL},
      {op_kind::dispatch, 7, N},  {op_kind::combine, 7, N},
  };
}

uint64_t input_seed(int rank, size_t op_index) { return 7919u * (rank + 1) + 104729u * op_index; }

// `rows` rows; never an empty vector, so that no exchange sees a null buffer (the
// in-process reference hands its buffers to memcpy even for zero rows).
std::vector<float> random_rows(int64_t rows, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> v(static_cast<size_t>(std::max<int64_t>(rows, 1) * hidden));
  for (auto& x : v) x = u(rng);
  return v;
}

// Rows per expert of rank `rank`'s dispatch at `op_index`; every third dispatch the last
// rank sends nothing (a decode step where all its sequences finished).
std::vector<int64_t> random_offsets(int rank, int num_ranks, size_t op_index) {
  std::mt19937_64 rng(input_seed(rank, op_index) + 1);
  std::uniform_int_distribution<int> cnt(0, max_per_expert);
  const bool silent = rank == num_ranks - 1 && op_index % 3 == 0;
  std::vector<int64_t> off(num_experts + 1, 0);
  for (int e = 0; e < num_experts; ++e)
    off[e + 1] = off[e] + (silent || e == empty_expert ? 0 : cnt(rng));
  return off;
}

// What one rank saw: every op's output rows, and every dispatch's local expert offsets.
struct trace {
  std::vector<std::vector<float>> rows;
  std::vector<std::vector<int64_t>> offsets;
};

status run_script(expert_exchange& ex, trace* out) {
  const auto ops = script();
  std::vector<exchange_handle> h(8);
  for (size_t i = 0; i < ops.size(); ++i) {
    const op& o = ops[i];
    const uint64_t seed = input_seed(ex.rank(), i);
    std::vector<float> got;
    got.reserve(1);  // data() stays non-null when an exchange resizes it to zero rows
    if (o.kind == op_kind::dispatch) {
      auto off = random_offsets(ex.rank(), ex.num_ranks(), i);
      auto send = random_rows(off[num_experts], seed);
      auto r = ex.dispatch(send.data(), off.data(), num_experts, hidden, o.mode, &got);
      if (!r) return r.err();
      h[o.handle] = *r;
      out->offsets.push_back(r->local_expert_offset);
    } else if (o.kind == op_kind::cached) {
      auto send = random_rows(h[o.handle].num_send_rows, seed);
      if (auto st = ex.dispatch_cached(h[o.handle], send.data(), hidden, o.mode, &got); !st)
        return st;
    } else {
      auto in = random_rows(h[o.handle].num_recv_rows, seed);
      const size_t n = static_cast<size_t>(h[o.handle].num_send_rows * hidden);
      got.assign(std::max<size_t>(n, 1), -1.0f);  // never null, as above
      if (auto st = ex.combine(h[o.handle], in.data(), hidden, o.mode, got.data()); !st) return st;
      got.resize(n);
    }
    out->rows.push_back(std::move(got));
  }
  return ok_status();
}

// Empty when equal bit for bit, else what differs first.
std::string compare(const trace& got, const trace& want) {
  if (got.offsets != want.offsets) return "local expert offsets differ";
  if (got.rows.size() != want.rows.size()) return "number of outputs differs";
  for (size_t i = 0; i < want.rows.size(); ++i) {
    if (got.rows[i].size() != want.rows[i].size())
      return "op " + std::to_string(i) + ": " + std::to_string(got.rows[i].size()) +
             " floats, want " + std::to_string(want.rows[i].size());
    if (!want.rows[i].empty() && std::memcmp(got.rows[i].data(), want.rows[i].data(),
                                             want.rows[i].size() * sizeof(float)) != 0)
      return "op " + std::to_string(i) + ": rows differ bitwise";
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

fabric_exchange_options options(const std::string& provider, bool shim, int rank,
                                bool shuffle = false, int ranks_per_node = 0) {
  fabric_exchange_options o;
  o.transport.provider = provider;
  o.transport.require_provider = true;
  o.transport.reorder_shim = shim;
  o.transport.shim_seed = 77 + static_cast<uint64_t>(rank);
  o.num_experts = num_experts;
  o.hidden = hidden;
  o.max_rows_per_rank = max_rows;
  o.chunk_bytes = 4096;  // the smallest chunk: several writes per peer, room to reorder
  o.op_timeout_ms = 20000;
  o.test_shuffle_seed = shuffle ? 5 + static_cast<uint64_t>(rank) : 0;
  o.ranks_per_node = ranks_per_node;
  return o;
}

int fail(int rank, const std::string& what) {
  std::fprintf(stderr, "rank %d: %s\n", rank, what.c_str());
  return 1;
}

// A rank of a fabric group: run the script, compare with the reference, wait for the others.
int script_rank(bootstrap& b, const std::string& provider, bool shim, bool shuffle,
                int ranks_per_node, const std::vector<trace>& want) {
  auto ex =
      make_fabric_expert_exchange(b, options(provider, shim, b.rank(), shuffle, ranks_per_node));
  if (!ex) return fail(b.rank(), "create: " + ex.err().to_string());
  trace got;
  if (auto st = run_script(**ex, &got); !st) return fail(b.rank(), st.err().to_string());
  if (auto diff = compare(got, want[b.rank()]); !diff.empty()) return fail(b.rank(), diff);
  // ep_group keeps its documented order; the shuffle makes the exchange restore it.
  if (((*ex)->reordered_dispatches() > 0) != shuffle)
    return fail(b.rank(),
                "reordered " + std::to_string((*ex)->reordered_dispatches()) + " dispatches");
  // Closing handle 4's step for 5, closing 5's and re-dispatching 4 for combine(4),
  // re-dispatching 5 for combine(5), closing 6's step for cached(6).
  if ((*ex)->extra_steps() != 5)
    return fail(b.rank(), "extra steps: " + std::to_string((*ex)->extra_steps()));
  // Peers may still wait on this rank's last writes: leave together.
  if (auto done = b.allgather(fabric::all_members(b), "", 20000); !done)
    return fail(b.rank(), "final barrier: " + done.err().to_string());
  return 0;
}

struct combo {
  std::string provider;
  bool shim;
  int ranks;
  bool shuffle = false;    // present the received rows shuffled (the exchange must sort)
  int ranks_per_node = 0;  // > 0: the normal group's two-level (node gateway) path
};

class fabric_exchange_threads : public ::testing::TestWithParam<combo> {};

TEST_P(fabric_exchange_threads, rows_equal_the_in_process_group_bit_for_bit) {
  const combo& c = GetParam();
  const auto want = reference_traces(c.ranks);
  auto report = fabric::launch_threads(c.ranks, [&](bootstrap& b) {
    return script_rank(b, c.provider, c.shim, c.shuffle, c.ranks_per_node, want);
  });
  for (size_t r = 0; r < report.exit_codes.size(); ++r)
    EXPECT_EQ(report.exit_codes[r], 0) << "rank " << r;
}

std::string combo_name(const ::testing::TestParamInfo<combo>& info) {
  return (info.param.provider == "shm" ? std::string("shm") : std::string("tcp")) +
         (info.param.shim ? "_shim_" : "_") + std::to_string(info.param.ranks) + "ranks" +
         (info.param.shuffle ? "_shuffled" : "") +
         (info.param.ranks_per_node > 0
              ? "_" + std::to_string(info.param.ranks_per_node) + "per_node"
              : "");
}

INSTANTIATE_TEST_SUITE_P(
    providers, fabric_exchange_threads,
    ::testing::Values(combo{"shm", false, 2}, combo{"shm", true, 2}, combo{"shm", false, 4},
                      combo{"shm", true, 4}, combo{"tcp", false, 2}, combo{"tcp", true, 2},
                      combo{"tcp", false, 4}, combo{"tcp", true, 4}, combo{"shm", true, 4, true},
                      combo{"tcp", false, 2, true}, combo{"shm", true, 4, false, 2}),
    combo_name);

class fabric_exchange_processes : public ::testing::TestWithParam<combo> {};

TEST_P(fabric_exchange_processes, ranks_as_processes_equal_the_in_process_group) {
  const combo& c = GetParam();
  const auto want = reference_traces(c.ranks);  // its threads are joined before the fork
  auto report = fabric::launch_processes(
      c.ranks,
      [&](bootstrap& b) {
        return script_rank(b, c.provider, c.shim, c.shuffle, c.ranks_per_node, want);
      },
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
    return says(make_fabric_expert_exchange(b, o), "3 experts do not split over 2 ranks") ? 0 : 1;
  });
  for (int code : report.exit_codes) EXPECT_EQ(code, 0);
}

TEST(fabric_exchange_errors, bad_calls_are_refused_and_the_exchange_keeps_working) {
  auto report = fabric::launch_threads(2, [&](bootstrap& b) {
    auto o = options("shm", false, b.rank());
    o.max_decode_rows_per_rank = 8;
    auto ex = make_fabric_expert_exchange(b, o);
    if (!ex) return fail(b.rank(), ex.err().to_string());
    expert_exchange& x = **ex;
    std::vector<float> recv;
    // One row over the normal bound, and over the decode bound: refused before the fabric.
    std::vector<int64_t> off(num_experts + 1, 0);
    for (int e = 0; e < num_experts; ++e) off[e + 1] = off[e] + (e == 0 ? max_rows + 1 : 0);
    auto big = random_rows(max_rows + 1, 1);
    if (!says(x.dispatch(big.data(), off.data(), num_experts, hidden, N, &recv),
              "max_rows_per_rank"))
      return fail(b.rank(), "over-bound dispatch not refused");
    for (int e = 0; e < num_experts; ++e) off[e + 1] = off[e] + (e == 0 ? 9 : 0);
    if (!says(x.dispatch(big.data(), off.data(), num_experts, hidden, LL, &recv),
              "max_decode_rows_per_rank"))
      return fail(b.rank(), "over-bound decode dispatch not refused");
    // Shapes other than the exchange's.
    if (!says(x.dispatch(big.data(), off.data(), num_experts, hidden + 1, N, &recv), "floats"))
      return fail(b.rank(), "wrong hidden not refused");
    if (!says(x.dispatch(big.data(), off.data(), num_experts - 2, hidden, N, &recv), "experts"))
      return fail(b.rank(), "wrong num_experts not refused");
    std::vector<int64_t> down = off;
    down[3] = down[2] - 1;
    if (!says(x.dispatch(big.data(), down.data(), num_experts, hidden, N, &recv), "decreases"))
      return fail(b.rank(), "decreasing offsets not refused");
    // A handle another exchange made.
    auto local = make_local_expert_exchange();
    auto foreign = local->dispatch(big.data(), off.data(), num_experts, hidden, N, &recv);
    if (!foreign) return fail(b.rank(), foreign.err().to_string());
    std::vector<float> back(static_cast<size_t>(foreign->num_send_rows * hidden));
    if (!says(x.combine(*foreign, recv.data(), hidden, N, back.data()), "does not come from"))
      return fail(b.rank(), "foreign handle not refused");
    // A handle whose counts were edited after its dispatch.
    auto edited = x.dispatch(big.data(), off.data(), num_experts, hidden, N, &recv);
    if (!edited) return fail(b.rank(), edited.err().to_string());
    exchange_handle copy = *edited;
    copy.num_recv_rows += 1;
    if (!says(x.combine(copy, recv.data(), hidden, N, back.data()), "row counts were changed"))
      return fail(b.rank(), "edited handle not refused");
    if (auto st = x.combine(*edited, recv.data(), hidden, N, back.data()); !st)
      return fail(b.rank(), st.err().to_string());
    // Nothing refused above reached the fabric: steps still work (9 rows fit the normal bound).
    auto h = x.dispatch(big.data(), off.data(), num_experts, hidden, N, &recv);
    if (!h) return fail(b.rank(), h.err().to_string());
    if (h->num_recv_rows != (b.rank() == 0 ? 18 : 0)) return fail(b.rank(), "wrong received rows");
    if (auto st = x.combine(*h, recv.data(), hidden, N, back.data()); !st)
      return fail(b.rank(), st.err().to_string());
    if (std::memcmp(back.data(), big.data(), 9 * hidden * sizeof(float)) != 0)
      return fail(b.rank(), "rows did not come back");
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
    // Rank 0 has one row too many for the normal group; rank 1 a legal step.
    const int64_t rows = b.rank() == 0 ? max_rows + 1 : 3;
    std::vector<int64_t> off(num_experts + 1, rows);
    off[0] = 0;
    auto send = random_rows(rows, 2);
    std::vector<float> recv;
    auto h = (*ex)->dispatch(send.data(), off.data(), num_experts, hidden, N, &recv);
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
  EXPECT_EQ(o->max_rows_per_rank, 300);
  EXPECT_EQ(o->max_decode_rows_per_rank, 21);
  EXPECT_EQ(o->op_timeout_ms, 1234);
  auto decode_only = fabric_exchange_options_from_config(*cfg, 0, 7);
  ASSERT_TRUE(decode_only.ok());
  EXPECT_EQ(decode_only->max_rows_per_rank, 21);
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
    o->test_shuffle_seed = c.shuffle ? 5 + static_cast<uint64_t>(b.rank()) : 0;
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
                                           combo{"tcp", true, 4}, combo{"shm", true, 4, true},
                                           combo{"tcp", true, 4, false, 2}),
                         combo_name);

}  // namespace
}  // namespace moerl::policy
