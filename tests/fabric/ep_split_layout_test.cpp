// Low-latency and normal mode on their split layout (ep_memory::host_split,
// fabric/DEVICE_MEMORY.md): the layout, row copy plans and reductions that ep_memory::cuda runs
// on device memory, run here on host memory with the CPU twins, through every check of the
// other EP tests (ep_rank_runner: rows attributable to their source rank and token, per-expert
// counts, combine bitwise equal to the reference, masked entries, a rank with no tokens; ll's
// dispatch_buffer() and combine_buffer() read in place by same-host peers, normal's rows
// stored in place into same-host peers' outputs), at every distance, and normal mode's
// gateways forwarding between nodes.
#include <gtest/gtest.h>

#include "tests/fabric/ep_rank_runner.h"

namespace moerl::fabric::test {
namespace {

struct split_case {
  std::string name;
  std::string provider;
  int ranks;
  std::string paths;
  int ranks_per_host;
  bool threads;
  int64_t ll_entries_per_write;
  ep_dtype dtype;
  ep_mode mode = ep_mode::low_latency;
  int ranks_per_node = 0;  // normal mode: > 0 splits the ranks into nodes (gateways forward)
};

void PrintTo(const split_case& c, std::ostream* os) { *os << c.name; }

class ep_split : public ::testing::TestWithParam<split_case> {};

TEST_P(ep_split, every_rank_receives_the_reference_rows_and_combines_bitwise) {
  const split_case& k = GetParam();
  ep_case c;
  c.provider = k.provider;
  c.mode = k.mode;
  c.ranks_per_node = k.ranks_per_node;
  c.memory = ep_memory::host_split;
  c.shim = true;  // reorders the network pairs' metadata and payload writes
  c.paths = k.paths;
  c.ranks_per_host = k.ranks_per_host;
  c.threads = k.threads;
  c.ll_entries_per_write = k.ll_entries_per_write;
  c.dtype = k.dtype;
  if (k.threads) {
    auto report = launch_threads(k.ranks, [&](bootstrap& b) { return run_rank(b, c); });
    EXPECT_TRUE(report.all_ok());
    return;
  }
  auto report = launch_processes(
      k.ranks, [&](bootstrap& b) { return run_rank(b, c); }, 120000);
  ASSERT_TRUE(report.ok()) << report.err().to_string();
  for (size_t r = 0; r < report->exit_codes.size(); ++r)
    EXPECT_EQ(report->exit_codes[r], 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(
    distances, ep_split,
    ::testing::Values(
        // Same host: every payload row through the peers' mappings (CUDA IPC on a device).
        split_case{"same_host_2ranks", "shm", 2, "auto", 0, false, 1, ep_dtype::bf16},
        split_case{"same_host_4ranks", "shm", 4, "auto", 0, false, 1, ep_dtype::bf16},
        split_case{"same_host_4ranks_fp32", "shm", 4, "auto", 0, false, 1, ep_dtype::fp32},
        split_case{"same_process_4ranks", "shm", 4, "auto", 0, true, 1, ep_dtype::bf16},
        // Two hosts of two ranks: network pairs write metadata and payload from staging
        // (FI_HMEM on a device), same-host pairs store in place.
        split_case{"two_hosts_tcp", "tcp", 4, "auto", 2, false, 1, ep_dtype::bf16},
        split_case{"two_hosts_tcp_batched", "tcp", 4, "auto", 2, false, 5, ep_dtype::bf16},
        // Every pair through libfabric.
        split_case{"fabric_tcp_2ranks", "tcp", 2, "fabric", 0, false, 1, ep_dtype::bf16},
        // Normal mode, the same distances: same-host rows stored in place into the peers'
        // outputs (payload) and dispatch regions (metadata), network rows written from
        // staging, combine partials reduced where the rows are.
        split_case{"normal_same_host_2ranks", "shm", 2, "auto", 0, false, 1, ep_dtype::bf16,
                   ep_mode::normal},
        split_case{"normal_same_host_4ranks", "shm", 4, "auto", 0, false, 1, ep_dtype::bf16,
                   ep_mode::normal},
        split_case{"normal_same_host_4ranks_fp32", "shm", 4, "auto", 0, false, 1, ep_dtype::fp32,
                   ep_mode::normal},
        split_case{"normal_same_process_4ranks", "shm", 4, "auto", 0, true, 1, ep_dtype::bf16,
                   ep_mode::normal},
        split_case{"normal_two_hosts_tcp", "tcp", 4, "auto", 2, false, 1, ep_dtype::bf16,
                   ep_mode::normal},
        split_case{"normal_fabric_tcp_2ranks", "tcp", 2, "fabric", 0, false, 1, ep_dtype::fp32,
                   ep_mode::normal},
        // Normal across nodes: gateways forward the inter-node rows (metadata and payload
        // rows copied apart) and sum the forwarded partials, over the network and on one host.
        split_case{"normal_two_nodes_tcp", "tcp", 4, "auto", 2, false, 1, ep_dtype::bf16,
                   ep_mode::normal, 2},
        split_case{"normal_two_nodes_same_host_fp32", "shm", 4, "auto", 0, false, 1, ep_dtype::fp32,
                   ep_mode::normal, 2},
        split_case{"normal_four_nodes_fabric", "tcp", 4, "fabric", 0, false, 1, ep_dtype::bf16,
                   ep_mode::normal, 1}),
    [](const auto& info) { return info.param.name; });

TEST(ep_split_config, device_memory_in_baseline_mode_is_refused_naming_host_staging) {
  auto report = launch_threads(2, [&](bootstrap& b) {
    for (ep_memory mem : {ep_memory::cuda, ep_memory::host_split}) {
      ep_case c;
      c.mode = ep_mode::baseline;
      c.memory = mem;
      auto g = ep_group::create(options_for(c, b.rank()), b, all_members(b), config_for(c));
      if (g.ok() || g.err().code != errc::invalid_argument ||
          g.err().message.find("ll and normal modes only") == std::string::npos ||
          g.err().message.find("host staging") == std::string::npos) {
        std::fprintf(stderr, "baseline/%s: %s\n", ep_memory_name(mem),
                     g.ok() ? "created" : g.err().message.c_str());
        return 1;
      }
    }
    return 0;
  });
  EXPECT_TRUE(report.all_ok());
}

// Forked ranks, so the parent never initialises CUDA (device_memory.h, "Fork").
TEST(ep_split_config, device_memory_without_a_device_is_an_error_naming_why) {
  auto report = launch_processes(
      2,
      [&](bootstrap& b) {
        if (device_count().ok()) return 0;  // a GPU: fabric_ep_device_test covers it
        for (ep_mode m : {ep_mode::low_latency, ep_mode::normal}) {
          ep_case c;
          c.mode = m;
          c.memory = ep_memory::cuda;
          c.paths = "auto";
          auto g = ep_group::create(options_for(c, b.rank()), b, all_members(b), config_for(c));
          const std::string why = cuda_build() ? "no CUDA device visible" : "has no CUDA";
          if (g.ok() || g.err().code != errc::cuda_error ||
              g.err().message.find("memory cuda") == std::string::npos ||
              g.err().message.find(why) == std::string::npos) {
            std::fprintf(stderr, "rank %d, %s: %s\n", b.rank(), ep_mode_name(m),
                         g.ok() ? "created" : g.err().message.c_str());
            return 1;
          }
        }
        return 0;
      },
      60000);
  ASSERT_TRUE(report.ok()) << report.err().to_string();
  EXPECT_TRUE(report->all_ok());
}

}  // namespace
}  // namespace moerl::fabric::test
