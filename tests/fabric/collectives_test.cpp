// Dense collectives over libfabric: ring all-reduce (fp32, bf16), broadcast and gather with sizes
// that do not divide by the rank count and that need several rounds, over shm and tcp,
// through the reorder shim; a rank that never joins makes the others fail, not hang.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "fabric/collectives.h"
#include "kernels/dtypes.h"

namespace moerl::fabric {
namespace {

struct coll_case {
  std::string provider;
  bool shim;
  int ranks;
};

transport_options topts(const coll_case& c, int rank) {
  transport_options o;
  o.provider = c.provider;
  o.require_provider = true;
  o.reorder_shim = c.shim;
  o.shim_seed = 555 + static_cast<uint64_t>(rank);
  return o;
}

collective_config small_rounds() {
  collective_config cfg;
  cfg.max_bytes = 8192;  // several rounds per call below
  cfg.chunk_bytes = 1000;
  cfg.op_timeout_ms = 20000;
  return cfg;
}

int run_collectives(bootstrap& b, const coll_case& c) {
  auto g = collective_group::create(topts(c, b.rank()), b, all_members(b), small_rounds());
  if (!g) {
    std::fprintf(stderr, "create: %s\n", g.err().to_string().c_str());
    return 1;
  }
  const int n = b.size(), r = (*g)->rank();
  for (size_t count : {size_t(1), size_t(7), size_t(1000), size_t(5003)}) {
    // fp32: integers, so every summation order gives the exact same result.
    std::vector<float> f(count);
    for (size_t i = 0; i < count; ++i) f[i] = static_cast<float>((i % 97) * (r + 1));
    if (auto st = (*g)->all_reduce_sum(f.data(), count, coll_dtype::fp32); !st) {
      std::fprintf(stderr, "all_reduce fp32: %s\n", st.err().to_string().c_str());
      return 2;
    }
    const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
    for (size_t i = 0; i < count; ++i)
      if (f[i] != static_cast<float>(i % 97) * ranks_sum) return 3;
    // bf16: small integers stay exact through every partial sum.
    std::vector<kernels::bf16> h(count);
    for (size_t i = 0; i < count; ++i)
      h[i] = kernels::float_to_bf16(static_cast<float>((i % 5) + r));
    if (auto st = (*g)->all_reduce_sum(h.data(), count, coll_dtype::bf16); !st) return 4;
    for (size_t i = 0; i < count; ++i) {
      const float want = static_cast<float>((i % 5) * n + n * (n - 1) / 2);
      if (kernels::bf16_to_float(h[i]) != want) return 5;
    }
  }
  for (int root = 0; root < n; ++root) {
    std::vector<char> data(20000);
    for (size_t i = 0; i < data.size(); ++i)
      data[i] = static_cast<char>(r == root ? (i * 13 + root) : 0);
    if (auto st = (*g)->broadcast(data.data(), data.size(), root); !st) return 6;
    for (size_t i = 0; i < data.size(); ++i)
      if (data[i] != static_cast<char>(i * 13 + root)) return 7;
  }
  for (int root = 0; root < n; ++root) {
    // 5003 bytes a rank: three rounds (max_bytes 8192 over at most 4 ranks), the last short.
    std::vector<char> mine(5003), all(r == root ? mine.size() * n : 0);
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<char>(i * 11 + r * 3 + root);
    if (auto st = (*g)->gather(mine.data(), mine.size(), r == root ? all.data() : nullptr, root);
        !st) {
      std::fprintf(stderr, "gather: %s\n", st.err().to_string().c_str());
      return 11;
    }
    for (size_t i = 0; i < all.size(); ++i) {
      const size_t from = i / mine.size(), at = i % mine.size();
      if (all[i] != static_cast<char>(at * 11 + from * 3 + root)) return 12;
    }
  }
  if (auto st = (*g)->broadcast(nullptr, 0, n); st || st.err().code != errc::invalid_argument)
    return 8;
  if (auto st = (*g)->gather("x", 1, nullptr, r); st || st.err().code != errc::invalid_argument)
    return 13;
  if (auto st = (*g)->all_reduce_sum(nullptr, 0, coll_dtype::fp32, memory_kind::cuda); st) return 9;
  if (auto done = b.allgather(all_members(b), "", 20000); !done) return 10;
  return 0;
}

class collectives : public ::testing::TestWithParam<coll_case> {};

TEST_P(collectives, all_reduce_broadcast_and_gather_give_the_exact_result) {
  const coll_case c = GetParam();
  auto report = launch_processes(
      c.ranks, [&](bootstrap& b) { return run_collectives(b, c); }, 120000);
  ASSERT_TRUE(report.ok()) << report.err().to_string();
  for (size_t r = 0; r < report->exit_codes.size(); ++r)
    EXPECT_EQ(report->exit_codes[r], 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(providers, collectives,
                         ::testing::Values(coll_case{"shm", false, 2}, coll_case{"shm", true, 3},
                                           coll_case{"shm", true, 4}, coll_case{"tcp", false, 4},
                                           coll_case{"tcp", true, 3}),
                         [](const auto& info) {
                           return std::string(info.param.provider == "shm" ? "shm" : "tcp") +
                                  (info.param.shim ? "_shim_" : "_") +
                                  std::to_string(info.param.ranks) + "ranks";
                         });

// One-round broadcasts from changing roots (a trainer group's share exchange: roots 1, 2, 3)
// while rank 0 comes late: no rank may write a round into rank 0's slot before rank 0 has
// copied the round that used it before. Before the release step (7 Dec), ranks 2 and 3 ran
// ahead as soon as their own data arrived, rank 3's round R+2 landed in rank 0's slot of round
// R, and rank 0 took rank 3's bytes for rank 1's.
TEST(collectives, one_round_broadcasts_and_gathers_wait_for_a_late_rank) {
  for (const char* provider : {"shm", "tcp"}) {
    auto report = launch_processes(
        4,
        [&](bootstrap& b) {
          auto g = collective_group::create(topts({provider, false, 4}, b.rank()), b,
                                            all_members(b), small_rounds());
          if (!g) return 1;
          const int r = (*g)->rank();
          for (int pass = 0; pass < 3; ++pass) {
            if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
            for (int root = 1; root < 4; ++root) {
              std::vector<char> data(4000);  // one round (max_bytes 8192)
              for (size_t i = 0; i < data.size(); ++i)
                data[i] = static_cast<char>(r == root ? (i * 7 + root * 31 + pass) : 0);
              if (auto st = (*g)->broadcast(data.data(), data.size(), root); !st) return 2;
              for (size_t i = 0; i < data.size(); ++i)
                if (data[i] != static_cast<char>(i * 7 + root * 31 + pass)) {
                  std::fprintf(stderr, "rank %d, pass %d: root %d's broadcast has other bytes\n", r,
                               pass, root);
                  return 3;
                }
            }
          }
          // Gathers to the late rank 0 back to back (a trainer group's share exchange since
          // 7 Dec): a sender may not write the next round but one before rank 0 copied out.
          for (int pass = 0; pass < 3; ++pass) {
            if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
            for (int round = 0; round < 3; ++round) {
              std::vector<char> mine(2000), all(r == 0 ? 4 * mine.size() : 0);  // one round
              for (size_t i = 0; i < mine.size(); ++i)
                mine[i] = static_cast<char>(i * 5 + r * 17 + pass * 3 + round);
              if (auto st = (*g)->gather(mine.data(), mine.size(), all.data(), 0); !st) return 5;
              for (size_t i = 0; i < all.size(); ++i) {
                const size_t from = i / mine.size(), at = i % mine.size();
                if (all[i] != static_cast<char>(at * 5 + from * 17 + pass * 3 + round)) {
                  std::fprintf(stderr, "pass %d, round %d: rank %zu's gathered bytes differ\n",
                               pass, round, from);
                  return 6;
                }
              }
            }
          }
          return b.allgather(all_members(b), "", 20000).ok() ? 0 : 4;
        },
        60000);
    ASSERT_TRUE(report.ok()) << report.err().to_string();
    for (size_t r = 0; r < report->exit_codes.size(); ++r)
      EXPECT_EQ(report->exit_codes[r], 0) << provider << ", rank " << r;
  }
}

TEST(collectives_faults, a_rank_that_never_joins_the_all_reduce_makes_the_others_fail) {
  auto report = launch_threads(3, [&](bootstrap& b) {
    collective_config cfg = small_rounds();
    cfg.op_timeout_ms = 500;
    auto g = collective_group::create(topts({"shm", false, 3}, b.rank()), b, all_members(b), cfg);
    if (!g) return 1;
    std::vector<float> v(100, 1.0f);
    if (b.rank() == 2) {
      // Absent from the collective, but alive until the others gave up.
      auto wait = b.allgather({0, 1, 2}, "", 20000);
      return wait.ok() ? 0 : 2;
    }
    auto st = (*g)->all_reduce_sum(v.data(), v.size(), coll_dtype::fp32);
    if (st || st.err().code != errc::timeout) return 3;
    auto again = (*g)->all_reduce_sum(v.data(), v.size(), coll_dtype::fp32);
    if (again || again.err().message.find("unusable") == std::string::npos) return 4;
    auto wait = b.allgather({0, 1, 2}, "", 20000);
    return wait.ok() ? 0 : 5;
  });
  for (int code : report.exit_codes) EXPECT_EQ(code, 0);
}

// The abort flag of a group whose member was lost ends the others' all-reduce at once with
// peer_dead, however long op_timeout_ms is (the absent rank raises it).
TEST(collectives_faults, an_abort_flag_ends_an_all_reduce_a_rank_never_joins) {
  auto abort = std::make_shared<std::atomic<bool>>(false);
  auto report = launch_threads(3, [&](bootstrap& b) {
    collective_config cfg = small_rounds();
    cfg.op_timeout_ms = 600000;  // only the flag can end the wait inside the test's time
    transport_options o = topts({"shm", false, 3}, b.rank());
    o.abort = abort;
    auto g = collective_group::create(o, b, all_members(b), cfg);
    if (!g) return 1;
    std::vector<float> v(100, 1.0f);
    if (b.rank() == 2) {
      abort->store(true);
      return b.allgather({0, 1, 2}, "", 600000).ok() ? 0 : 2;
    }
    auto st = (*g)->all_reduce_sum(v.data(), v.size(), coll_dtype::fp32);
    if (st || st.err().code != errc::peer_dead ||
        st.err().message.find("aborted") == std::string::npos)
      return 3;
    return b.allgather({0, 1, 2}, "", 600000).ok() ? 0 : 4;
  });
  for (int code : report.exit_codes) EXPECT_EQ(code, 0);
}

}  // namespace
}  // namespace moerl::fabric
