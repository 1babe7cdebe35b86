// Faults: a rank killed in the middle of a step, or one that stops progressing, makes the
// step fail on every other rank within fabric.op_timeout_ms (an error, never a hang); the
// broken group refuses further steps; and the survivors build a new group without the
// lost rank and get correct results from it.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "tests/fabric/ep_rank_runner.h"

namespace moerl::fabric::test {
namespace {

enum class fault { killed, stalled };

struct fault_case {
  std::string provider;
  ep_mode mode;
  fault kind;
};

constexpr int kLost = 2;

int run_with_fault(bootstrap& b, const fault_case& f) {
  ep_case c;
  c.provider = f.provider;
  c.mode = f.mode;
  ep_config cfg = config_for(c);
  cfg.op_timeout_ms = 1500;
  auto g = ep_group::create(options_for(c, b.rank()), b, all_members(b), cfg);
  if (!g) return report(b.rank(), "create", g.err());
  for (int s = 0; s < 2; ++s)
    if (int rc = run_step(**g, step_workload(c, b.size(), s), b.rank()); rc != 0) return rc;

  const workload_params p = step_workload(c, b.size(), 2);
  const rank_inputs in = make_rank_inputs(p, (*g)->rank());
  if (b.rank() == kLost) {
    // Mid-step: counts (and, in low-latency mode, data) are on their way; nothing more follows.
    if (!(*g)->dispatch_send(in.x.data(), in.topk_idx.data(), in.topk_weights.data(),
                             in.num_tokens))
      return 20;
    if (f.kind == fault::killed) ::raise(SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(4 * cfg.op_timeout_ms));
    return 0;  // stalled: wakes up long after the others gave up, and leaves
  }
  // Survivors: the step must end in an error, in dispatch or in combine.
  error step_error;
  auto d = (*g)->dispatch(in.x.data(), in.topk_idx.data(), in.topk_weights.data(), in.num_tokens);
  if (d) {
    std::vector<char> eo, y(std::max<size_t>(in.x.size(), 1));
    apply_experts(p, (*g)->rank() * (*g)->num_local_experts(), **d, eo);
    auto st = (*g)->combine(**d, eo.data(), y.data());
    if (st) return 21;  // the lost rank's share cannot have arrived
    step_error = st.err();
  } else {
    step_error = d.err();
  }
  if (step_error.code != errc::timeout && step_error.code != errc::peer_dead)
    return report(b.rank(), "unexpected error kind", step_error);
  // The broken group refuses further steps with the original error.
  auto again =
      (*g)->dispatch_send(in.x.data(), in.topk_idx.data(), in.topk_weights.data(), in.num_tokens);
  if (again || again.err().message.find("unusable") == std::string::npos) return 22;

  // Rebuild without the lost rank; group ranks renumber to 0..2.
  g->reset();
  const std::vector<int> survivors = {0, 1, 3};
  auto g2 = ep_group::create(options_for(c, b.rank()), b, survivors, config_for(c));
  if (!g2) return report(b.rank(), "rebuild", g2.err());
  for (int s = 0; s < 3; ++s)
    if (int rc = run_step(**g2, step_workload(c, 3, 10 + s), b.rank()); rc != 0) return rc;
  if (auto done = b.allgather(survivors, "", 20000); !done)
    return report(b.rank(), "barrier", done.err());
  return 0;
}

class ep_faults : public ::testing::TestWithParam<fault_case> {};

TEST_P(ep_faults, a_lost_rank_fails_the_step_everywhere_and_survivors_rebuild) {
  const fault_case f = GetParam();
  auto report = launch_processes(
      4, [&](bootstrap& b) { return run_with_fault(b, f); }, 60000);
  ASSERT_TRUE(report.ok()) << report.err().to_string();
  for (int r = 0; r < 4; ++r) {
    if (r == kLost)
      EXPECT_EQ(report->exit_codes[r], f.kind == fault::killed ? -SIGKILL : 0);
    else
      EXPECT_EQ(report->exit_codes[r], 0) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(faults, ep_faults,
                         ::testing::Values(fault_case{"shm", ep_mode::normal, fault::killed},
                                           fault_case{"shm", ep_mode::low_latency, fault::killed},
                                           fault_case{"tcp", ep_mode::normal, fault::killed},
                                           fault_case{"tcp", ep_mode::low_latency, fault::killed},
                                           fault_case{"shm", ep_mode::baseline, fault::stalled},
                                           fault_case{"tcp", ep_mode::normal, fault::stalled}),
                         [](const auto& info) {
                           return std::string(info.param.provider == "shm" ? "shm" : "tcp") + "_" +
                                  ep_mode_name(info.param.mode) +
                                  (info.param.kind == fault::killed ? "_killed" : "_stalled");
                         });

// A group spanning processes whose member was lost (actors/RUNTIME.md, "Groups across
// nodes"): its ranks' abort flag ends a wait for the lost rank's writes at once, with
// peer_dead naming the abort, however long fabric.op_timeout_ms is. The lost rank (alive
// here, it only stops taking part) raises the flag after its dispatch_send.
TEST(ep_abort, an_abort_flag_ends_a_wait_for_a_rank_that_stopped) {
  auto abort = std::make_shared<std::atomic<bool>>(false);
  auto report = launch_threads(3, [&](bootstrap& b) -> int {
    ep_case c;
    ep_config cfg = config_for(c);
    cfg.op_timeout_ms = 600000;  // only the flag can end the wait inside the test's time
    transport_options o = options_for(c, b.rank());
    o.abort = abort;
    auto g = ep_group::create(o, b, all_members(b), cfg);
    if (!g) return fabric::test::report(b.rank(), "create", g.err());
    const workload_params p = step_workload(c, b.size(), 0);
    const rank_inputs in = make_rank_inputs(p, (*g)->rank());
    if (b.rank() == 2) {
      if (!(*g)->dispatch_send(in.x.data(), in.topk_idx.data(), in.topk_weights.data(),
                               in.num_tokens))
        return 30;
      abort->store(true);
      return b.allgather({0, 1, 2}, "", 600000).ok() ? 0 : 31;
    }
    auto d = (*g)->dispatch(in.x.data(), in.topk_idx.data(), in.topk_weights.data(), in.num_tokens);
    error e;
    if (d) {
      std::vector<char> eo, y(std::max<size_t>(in.x.size(), 1));
      apply_experts(p, (*g)->rank() * (*g)->num_local_experts(), **d, eo);
      auto st = (*g)->combine(**d, eo.data(), y.data());
      if (st) return 32;
      e = st.err();
    } else {
      e = d.err();
    }
    if (e.code != errc::peer_dead || e.message.find("aborted") == std::string::npos)
      return fabric::test::report(b.rank(), "not aborted", e);
    return b.allgather({0, 1, 2}, "", 600000).ok() ? 0 : 33;
  });
  for (int code : report.exit_codes) EXPECT_EQ(code, 0);
}

}  // namespace
}  // namespace moerl::fabric::test
