// Low-latency and normal mode with their payload rows in device memory (ep_memory::cuda, fabric/
// DEVICE_MEMORY.md): forked ranks sharing the one GPU exchange through CUDA IPC, with every
// check of the other EP tests (ep_rank_runner: rows attributable to their source rank and
// token, per-expert counts, combine bitwise equal to the reference, masked entries, a rank
// with no tokens; ll's dispatch_buffer() and combine_buffer() read in place, normal's rows
// stored in place into the peers' device outputs, and normal's gateways forwarding between
// two "nodes" of one host); x, the expert
// outputs and y are device memory. A group spanning hosts over tcp (no FI_HMEM) is refused
// naming host staging. Without a visible device every test skips, saying so (the parent never
// touches CUDA: a child of a process that initialised CUDA cannot use it).
#include <gtest/gtest.h>

#include "tests/fabric/device_ranks.h"
#include "tests/fabric/ep_rank_runner.h"

namespace moerl::fabric::test {
namespace {

ep_case device_case(ep_dtype dtype, ep_mode mode = ep_mode::low_latency) {
  ep_case c;
  c.mode = mode;
  c.memory = ep_memory::cuda;
  c.paths = "auto";
  c.provider = "tcp";  // the fabric is opened, never used: every pair is on this host
  c.dtype = dtype;
  return c;
}

class ep_device : public ::testing::TestWithParam<ep_mode> {};

TEST_P(ep_device, two_processes_on_one_gpu_match_the_reference_through_cuda_ipc) {
  const ep_case c = device_case(ep_dtype::bf16, GetParam());
  expect_ranks_passed(launch_processes(
      2, [&](bootstrap& b) { return device_count() ? run_rank(b, c) : kNoDevice; }, 120000));
}

TEST_P(ep_device, four_processes_on_one_gpu_match_the_reference_in_bf16_and_fp32) {
  for (ep_dtype dtype : {ep_dtype::bf16, ep_dtype::fp32}) {
    const ep_case c = device_case(dtype, GetParam());
    expect_ranks_passed(launch_processes(
        4, [&](bootstrap& b) { return device_count() ? run_rank(b, c) : kNoDevice; }, 120000));
  }
}

TEST_P(ep_device, a_group_spanning_hosts_over_tcp_is_refused_naming_host_staging) {
  const ep_mode mode = GetParam();
  expect_ranks_passed(launch_processes(
      2,
      [mode](bootstrap& b) {
        if (!device_count()) return kNoDevice;
        ep_case c = device_case(ep_dtype::bf16, mode);
        c.ranks_per_host = 1;  // two "hosts": a network pair, and tcp has no FI_HMEM
        auto g = ep_group::create(options_for(c, b.rank()), b, all_members(b), config_for(c));
        if (g.ok()) return 1;
        if (g.err().message.find("host staging") == std::string::npos) {
          std::fprintf(stderr, "rank %d: %s\n", b.rank(), g.err().message.c_str());
          return 2;
        }
        return 0;
      },
      60000));
}

INSTANTIATE_TEST_SUITE_P(modes, ep_device, ::testing::Values(ep_mode::low_latency, ep_mode::normal),
                         [](const auto& info) { return std::string(ep_mode_name(info.param)); });

// Normal mode's gateways on one GPU: two "nodes" of two ranks, the inter-node rows forwarded
// from the gateway's device receive rows (same host: CUDA IPC all the way).
TEST(ep_device_normal, two_nodes_of_two_processes_forward_through_the_gateways) {
  ep_case c = device_case(ep_dtype::bf16, ep_mode::normal);
  c.ranks_per_node = 2;
  expect_ranks_passed(launch_processes(
      4, [&](bootstrap& b) { return device_count() ? run_rank(b, c) : kNoDevice; }, 120000));
}

}  // namespace
}  // namespace moerl::fabric::test
