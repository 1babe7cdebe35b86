// Dispatch/combine in every mode, over shm and tcp, with and without the reorder shim,
// with ranks as processes and as threads: per-expert counts, the sorted set of received
// rows with every payload byte attributable, and bitwise combine results, through Zipf
// skew, tokens routed to one rank several times, masked entries, uneven and zero token
// counts, and more steps than the immediate's step field can count.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <cstring>

#include "kernels/dtypes.h"
#include "tests/fabric/ep_rank_runner.h"

namespace moerl::fabric::test {
namespace {

struct combo {
  std::string provider;
  bool shim;
  int ranks;
  ep_mode mode;
};

std::string combo_name(const ::testing::TestParamInfo<combo>& info) {
  const combo& c = info.param;
  return std::string(c.provider == "shm" ? "shm" : "tcp") + (c.shim ? "_shim" : "") + "_" +
         std::to_string(c.ranks) + "ranks_" + ep_mode_name(c.mode);
}

std::vector<combo> all_combos() {
  std::vector<combo> out;
  for (const char* prov : {"shm", "tcp"})
    for (bool shim : {false, true})
      for (int ranks : {2, 4, 8})
        for (ep_mode m : {ep_mode::normal, ep_mode::low_latency, ep_mode::baseline})
          out.push_back({prov, shim, ranks, m});
  return out;
}

class ep_processes : public ::testing::TestWithParam<combo> {};

TEST_P(ep_processes, every_rank_receives_the_reference_rows_and_combines_bitwise) {
  const combo& k = GetParam();
  ep_case c;
  c.provider = k.provider;
  c.shim = k.shim;
  c.mode = k.mode;
  auto report = launch_processes(
      k.ranks, [&](bootstrap& b) { return run_rank(b, c); }, 120000);
  ASSERT_TRUE(report.ok()) << report.err().to_string();
  for (size_t r = 0; r < report->exit_codes.size(); ++r)
    EXPECT_EQ(report->exit_codes[r], 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(modes, ep_processes, ::testing::ValuesIn(all_combos()), combo_name);

class ep_threads : public ::testing::TestWithParam<combo> {};

TEST_P(ep_threads, ranks_as_threads_of_one_process_get_the_same_results) {
  const combo& k = GetParam();
  ep_case c;
  c.provider = k.provider;
  c.shim = k.shim;
  c.mode = k.mode;
  c.steps = 6;
  auto report = launch_threads(k.ranks, [&](bootstrap& b) { return run_rank(b, c); });
  for (size_t r = 0; r < report.exit_codes.size(); ++r)
    EXPECT_EQ(report.exit_codes[r], 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(modes, ep_threads,
                         ::testing::Values(combo{"shm", true, 4, ep_mode::normal},
                                           combo{"shm", true, 4, ep_mode::low_latency},
                                           combo{"shm", true, 4, ep_mode::baseline},
                                           combo{"tcp", true, 2, ep_mode::normal},
                                           combo{"tcp", false, 3, ep_mode::low_latency}),
                         combo_name);

struct node_case {
  std::string provider;
  int ranks, ranks_per_node;
};

class ep_nodes : public ::testing::TestWithParam<node_case> {};

// Normal mode with the ranks split into nodes: a token crosses to each other node once and
// is forwarded inside it; results match the reference in that path's summation order.
TEST_P(ep_nodes, tokens_cross_to_each_node_once_and_fan_out_inside_it) {
  const node_case k = GetParam();
  ep_case c;
  c.provider = k.provider;
  c.shim = true;
  c.mode = ep_mode::normal;
  c.ranks_per_node = k.ranks_per_node;
  c.steps = 12;
  auto report = launch_processes(
      k.ranks, [&](bootstrap& b) { return run_rank(b, c); }, 120000);
  ASSERT_TRUE(report.ok()) << report.err().to_string();
  for (size_t r = 0; r < report->exit_codes.size(); ++r)
    EXPECT_EQ(report->exit_codes[r], 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(nodes, ep_nodes,
                         ::testing::Values(node_case{"shm", 4, 2}, node_case{"shm", 8, 2},
                                           node_case{"shm", 8, 4}, node_case{"tcp", 4, 2},
                                           node_case{"shm", 4, 1}),
                         [](const auto& info) {
                           return std::string(info.param.provider == "shm" ? "shm_" : "tcp_") +
                                  std::to_string(info.param.ranks) + "ranks_" +
                                  std::to_string(info.param.ranks_per_node) + "per_node";
                         });

// A transport per distance: ranks of one process (same_process), processes of one host
// (same_host, shared-memory mappings), and a mix where two "hosts" of two ranks each talk
// through libfabric (tcp or shm, under the reorder shim) while ranks of one host share memory.
struct paths_case {
  std::string name;
  std::string provider;
  int ranks, ranks_per_host;
  bool threads;
};

class ep_paths : public ::testing::TestWithParam<paths_case> {};

TEST_P(ep_paths, every_mix_of_distances_receives_the_reference_rows_and_combines_bitwise) {
  const paths_case& k = GetParam();
  for (ep_mode m : {ep_mode::normal, ep_mode::low_latency, ep_mode::baseline}) {
    ep_case c;
    c.provider = k.provider;
    c.shim = true;  // covers the network pairs of the mix
    c.mode = m;
    c.paths = "auto";
    c.ranks_per_host = k.ranks_per_host;
    c.threads = k.threads;
    c.steps = 18;
    if (k.threads) {
      auto report = launch_threads(k.ranks, [&](bootstrap& b) { return run_rank(b, c); });
      EXPECT_TRUE(report.all_ok()) << ep_mode_name(m);
    } else {
      auto report = launch_processes(
          k.ranks, [&](bootstrap& b) { return run_rank(b, c); }, 120000);
      ASSERT_TRUE(report.ok()) << report.err().to_string();
      EXPECT_TRUE(report->all_ok()) << ep_mode_name(m);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(mixes, ep_paths,
                         ::testing::Values(paths_case{"same_process", "shm", 4, 0, true},
                                           paths_case{"same_host", "shm", 4, 0, false},
                                           paths_case{"same_host_8ranks", "shm", 8, 0, false},
                                           paths_case{"two_hosts_tcp", "tcp", 4, 2, false},
                                           paths_case{"two_hosts_shm_fabric", "shm", 4, 2, false},
                                           paths_case{"two_hosts_threads_tcp", "tcp", 4, 2, true}),
                         [](const auto& info) { return info.param.name; });

TEST(ep_ll_batched, low_latency_writes_filling_several_slots_still_match_the_reference) {
  for (const char* prov : {"shm", "tcp"}) {
    ep_case c;
    c.provider = prov;
    c.mode = ep_mode::low_latency;
    c.shim = true;
    c.ll_entries_per_write = 5;
    auto report = launch_processes(
        4, [&](bootstrap& b) { return run_rank(b, c); }, 60000);
    ASSERT_TRUE(report.ok()) << report.err().to_string();
    EXPECT_TRUE(report->all_ok()) << prov;
  }
}

// DeepEP's layout (moerl.ep's low-latency channels): a block of num_ranks * max_tokens rows
// per local expert, the received rows placed at the caller's memory, the experts' outputs
// read from the same layout (combine_buffer() in place on odd steps, the caller's own on even
// ones), on the interleaved and split layouts, same-host and over the network.
TEST(ep_ll_expert_stride, rows_in_per_expert_blocks_match_the_reference_and_leave_the_gaps_alone) {
  for (const char* prov : {"shm", "tcp"})
    for (ep_memory memory : {ep_memory::host, ep_memory::host_split}) {
      ep_case c;
      c.provider = prov;
      c.mode = ep_mode::low_latency;
      c.shim = true;
      c.memory = memory;
      c.steps = 10;
      c.ll_expert_stride = 4 * c.tokens;
      auto report = launch_processes(
          4, [&](bootstrap& b) { return run_rank(b, c); }, 60000);
      ASSERT_TRUE(report.ok()) << report.err().to_string();
      EXPECT_TRUE(report->all_ok()) << prov << " " << ep_memory_name(memory);
    }
}

TEST(ep_ll_expert_stride, is_low_latency_only_and_needs_recv_rows_before_a_step) {
  auto report = launch_threads(2, [&](bootstrap& b) {
    ep_case c;
    c.ll_expert_stride = 2 * c.tokens;
    auto normal = ep_group::create(options_for(c, b.rank()), b, all_members(b), config_for(c));
    if (normal.ok() || normal.err().message.find("ll_expert_stride") == std::string::npos) return 1;
    c.mode = ep_mode::low_latency;
    auto g = ep_group::create(options_for(c, b.rank()), b, all_members(b), config_for(c));
    if (!g) return 2;
    std::vector<char> x(static_cast<size_t>(c.hidden) * 2);
    std::vector<int64_t> idx = {0, 1, 2, 3};
    std::vector<float> w(4, 0.5f);
    auto st = (*g)->dispatch_send(x.data(), idx.data(), w.data(), 1);
    if (st.ok() || st.err().message.find("set_recv_rows") == std::string::npos) return 3;
    c.ll_expert_stride = 0;
    auto compact = ep_group::create(options_for(c, b.rank()), b, all_members(b), config_for(c));
    if (!compact || (*compact)->set_recv_rows(x.data()).ok()) return 4;
    return 0;
  });
  for (int code : report.exit_codes) EXPECT_EQ(code, 0);
}

TEST(ep_dtypes, fp32_rows_and_combine_match_the_reference_in_every_mode) {
  for (ep_mode m : {ep_mode::normal, ep_mode::low_latency, ep_mode::baseline}) {
    ep_case c;
    c.mode = m;
    c.shim = true;
    c.dtype = ep_dtype::fp32;
    c.steps = 5;
    auto report = launch_processes(
        4, [&](bootstrap& b) { return run_rank(b, c); }, 60000);
    ASSERT_TRUE(report.ok()) << report.err().to_string();
    EXPECT_TRUE(report->all_ok()) << ep_mode_name(m);
  }
}

TEST(ep_config_errors, bad_group_shapes_and_inputs_are_errors_naming_the_problem) {
  auto report = launch_threads(2, [&](bootstrap& b) {
    ep_case c;
    ep_config cfg = config_for(c);
    cfg.num_experts = 47;  // not a multiple of 2
    auto g = ep_group::create(options_for(c, b.rank()), b, all_members(b), cfg);
    if (g.ok() || g.err().code != errc::invalid_argument ||
        g.err().message.find("num_experts") == std::string::npos)
      return 1;
    auto ok = ep_group::create(options_for(c, b.rank()), b, all_members(b), config_for(c));
    if (!ok) return 2;
    // An expert id outside [0, num_experts) is refused before anything is sent.
    std::vector<char> x(static_cast<size_t>(c.hidden) * 2);
    std::vector<int64_t> idx = {0, 1, 2, 48};
    std::vector<float> w(4, 0.5f);
    auto st = (*ok)->dispatch_send(x.data(), idx.data(), w.data(), 1);
    if (st.ok() || st.err().code != errc::invalid_argument) return 3;
    // More tokens than the group was sized for.
    st = (*ok)->dispatch_send(x.data(), idx.data(), w.data(), c.tokens + 1);
    if (st.ok() || st.err().message.find("num_tokens") == std::string::npos) return 4;
    return 0;
  });
  for (int code : report.exit_codes) EXPECT_EQ(code, 0);
}

// ep_config::output_slots (PROTOCOL.md, "Rows in place"): a step fills the slot selected
// for it, same-host senders store into the slot the receiver announced, and the other slots
// keep their rows; output_slot_file maps a slot a second time. With one expert per rank and
// weight 1 (moerl.ep's DeepEP layout) the expert side copies its rows as partials instead of
// reducing them: y must still be the reduction's bits (-0 rows give +0).
TEST(ep_output_slots, a_slot_keeps_its_rows_while_later_steps_fill_others) {
  auto launched = launch_threads(2, [&](bootstrap& b) {
    ep_case c;
    c.paths = "auto";
    c.num_experts = 2;
    c.topk = 2;
    c.tokens = 8;
    c.hidden = 2048;  // one slot's rows: several pages
    ep_config cfg = config_for(c);
    cfg.output_slots = 3;
    auto g = ep_group::create(options_for(c, b.rank()), b, all_members(b), cfg);
    if (!g) return report(b.rank(), "create", g.err());
    ep_group& group = **g;
    const int64_t row = c.hidden * 2, n = c.tokens;
    std::vector<int64_t> idx(static_cast<size_t>(n * 2));
    for (int64_t t = 0; t < n; ++t) idx[t * 2] = 0, idx[t * 2 + 1] = 1;
    const std::vector<float> ones(idx.size(), 1.0f);
    // Step s's tokens: bf16 small integers (exact), -0 in column 0.
    auto tokens = [&](int s) {
      std::vector<uint16_t> x(static_cast<size_t>(n * c.hidden));
      for (int64_t i = 0; i < n * c.hidden; ++i)
        x[i] =
            kernels::float_to_bf16(static_cast<float>((i + 7 * s + 3 * b.rank()) % 64 - 32)).bits;
      for (int64_t t = 0; t < n; ++t) x[t * c.hidden] = 0x8000;
      return x;
    };
    std::vector<std::vector<char>> seen(3);
    std::vector<const char*> at(3);
    for (int s = 0; s < 3; ++s) {
      const int slot = s == 2 ? 0 : s;
      if (auto st = group.select_output_slot(slot); !st)
        return report(b.rank(), "select", st.err());
      auto x = tokens(s);
      auto out = group.dispatch(x.data(), idx.data(), ones.data(), n);
      if (!out) return report(b.rank(), "dispatch", out.err());
      if ((*out)->num_recv_rows != 2 * n) return 10;
      at[s] = static_cast<const char*>((*out)->recv_x);
      seen[s].assign(at[s], at[s] + 2 * n * row);
      if (s == 1) {
        // Step 0's rows in slot 0 are untouched, and slot 1 mapped again shows step 1's.
        if (at[1] == at[0] || std::memcmp(at[0], seen[0].data(), seen[0].size()) != 0) return 11;
        const ep_group::slot_file f = group.output_slot_file(1);
        if (f.fd < 0 || f.offset != f.bytes || f.offset % 4096 != 0) return 12;
        void* m = ::mmap(nullptr, static_cast<size_t>(f.bytes), PROT_READ, MAP_SHARED, f.fd,
                         static_cast<off_t>(f.offset));
        if (m == MAP_FAILED) return 13;
        const bool same = std::memcmp(m, at[1], seen[1].size()) == 0;
        ::munmap(m, static_cast<size_t>(f.bytes));
        if (!same) return 14;
      }
      std::vector<uint16_t> y(static_cast<size_t>(n * c.hidden));
      if (auto st = group.combine(**out, (*out)->recv_x, y.data()); !st)
        return report(b.rank(), "combine", st.err());
      for (int64_t i = 0; i < n * c.hidden; ++i) {
        const float v = kernels::bf16_to_float(kernels::bf16{x[i]});
        if (y[i] != kernels::float_to_bf16(0.0f + v + v).bits) return 15;  // -0 + -0 from +0: +0
      }
      if (y[0] != 0) return 16;
    }
    // Step 2 reused slot 0 (same memory, new rows); the slot numbers are checked.
    if (at[2] != at[0] || seen[2] == seen[0]) return 17;
    if (group.select_output_slot(3).ok() || group.select_output_slot(-1).ok()) return 18;
    ep_config ll = cfg;
    ll.mode = ep_mode::low_latency;
    auto bad = ep_group::create(options_for(c, b.rank()), b, all_members(b), ll);
    if (bad.ok() || bad.err().message.find("output_slots") == std::string::npos) return 19;
    return 0;
  });
  for (int code : launched.exit_codes) EXPECT_EQ(code, 0);
}

}  // namespace
}  // namespace moerl::fabric::test
