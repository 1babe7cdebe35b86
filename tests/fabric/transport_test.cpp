// The transport on real providers: writes with immediates land, immediates are counted,
// the shim still delivers every byte and every completion exactly once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "fabric/bootstrap.h"
#include "fabric/device_memory.h"
#include "fabric/transport.h"

namespace moerl::fabric {
namespace {

struct params {
  std::string provider;
  bool shim;
};

// Each rank writes `num_writes` blocks into every peer's region with an immediate naming
// the writer and the block; every rank checks every byte and every immediate.
int exchange_blocks(bootstrap& b, const params& p, int num_writes, size_t block) {
  transport_options o;
  o.provider = p.provider;
  o.require_provider = true;
  o.reorder_shim = p.shim;
  o.shim_seed = 7 + b.rank();
  auto t = open_transport(o);
  if (!t) return 10;
  const int n = b.size();
  std::vector<char> src(num_writes * block), dst(n * num_writes * block, 0);
  for (size_t i = 0; i < src.size(); ++i)
    src[i] = static_cast<char>((i * 31 + b.rank() * 7) & 0x7f);
  auto s = (*t)->register_memory(src.data(), src.size());
  auto d = (*t)->register_memory(dst.data(), dst.size());
  if (!s || !d) return 11;
  std::string mine = (*t)->address();
  mine.append(reinterpret_cast<const char*>(&d->remote), sizeof(remote_region));
  auto all = b.allgather(all_members(b), mine, 10000);
  if (!all) return 12;
  std::vector<std::string> addrs;
  std::vector<remote_region> regions(n);
  for (int r = 0; r < n; ++r) {
    const std::string& e = (*all)[r];
    const size_t alen = e.size() - sizeof(remote_region);
    addrs.push_back(e.substr(0, alen));
    std::memcpy(&regions[r], e.data() + alen, sizeof(remote_region));
  }
  if (!(*t)->set_peers(addrs)) return 13;
  const int64_t deadline = now_ns() + 20'000'000'000;
  for (int peer = 0; peer < n; ++peer)
    for (int w = 0; w < num_writes; ++w) {
      const uint64_t off = (static_cast<uint64_t>(b.rank()) * num_writes + w) * block;
      if (!(*t)->write(peer, *s, src.data() + w * block, block, regions[peer], off,
                       static_cast<uint32_t>(b.rank() << 16 | w), deadline))
        return 14;
    }
  std::vector<uint32_t> imms;
  while ((imms.size() < static_cast<size_t>(n * num_writes) || (*t)->outstanding() > 0) &&
         now_ns() < deadline)
    if (!(*t)->progress(imms)) return 15;
  if (imms.size() != static_cast<size_t>(n * num_writes)) return 16;
  std::sort(imms.begin(), imms.end());
  for (int r = 0; r < n; ++r)
    for (int w = 0; w < num_writes; ++w)
      if (imms[r * num_writes + w] != static_cast<uint32_t>(r << 16 | w)) return 17;
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < num_writes * block; ++i)
      if (dst[r * num_writes * block + i] != static_cast<char>((i * 31 + r * 7) & 0x7f)) return 18;
  // Nobody leaves before everyone has checked: a peer's endpoint must outlive our writes.
  if (!b.allgather(all_members(b), "", 10000)) return 19;
  return 0;
}

class transport_test : public ::testing::TestWithParam<params> {};

TEST_P(transport_test, every_write_lands_and_every_immediate_arrives_once_between_threads) {
  const params p = GetParam();
  auto report = launch_threads(3, [&](bootstrap& b) { return exchange_blocks(b, p, 16, 5000); });
  for (int c : report.exit_codes) EXPECT_EQ(c, 0);
}

TEST_P(transport_test, every_write_lands_and_every_immediate_arrives_once_between_processes) {
  const params p = GetParam();
  auto report = launch_processes(
      4, [&](bootstrap& b) { return exchange_blocks(b, p, 8, 70000); }, 60000);
  ASSERT_TRUE(report.ok()) << report.err().to_string();
  for (int c : report->exit_codes) EXPECT_EQ(c, 0);
}

INSTANTIATE_TEST_SUITE_P(providers, transport_test,
                         ::testing::Values(params{"shm", false}, params{"shm", true},
                                           params{"tcp", false}, params{"tcp", true}),
                         [](const auto& info) {
                           return std::string(info.param.provider == "shm" ? "shm" : "tcp") +
                                  (info.param.shim ? "_shim" : "");
                         });

// The shim is not a pass-through: completions of writes posted in order arrive out of
// order, yet each completion still means its own bytes are all in place.
TEST(reorder_shim, completions_arrive_out_of_posting_order_but_each_covers_its_bytes) {
  constexpr int kWrites = 64;
  constexpr size_t kBlock = 3000;
  auto report = launch_threads(2, [&](bootstrap& b) {
    transport_options o;
    o.provider = "shm";
    o.reorder_shim = b.rank() == 0;  // the writer's writes go through the shim
    o.shim_seed = 42;
    auto t = open_transport(o);
    if (!t) return 10;
    std::vector<char> buf(kWrites * kBlock, 0);
    if (b.rank() == 0)
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<char>(1 + (i / kBlock) % 100);
    auto reg = (*t)->register_memory(buf.data(), buf.size());
    if (!reg) return 11;
    std::string mine = (*t)->address();
    mine.append(reinterpret_cast<const char*>(&reg->remote), sizeof(remote_region));
    auto all = b.allgather(all_members(b), mine, 10000);
    if (!all) return 12;
    std::vector<std::string> addrs;
    std::vector<remote_region> regions(2);
    for (int r = 0; r < 2; ++r) {
      const std::string& e = (*all)[r];
      addrs.push_back(e.substr(0, e.size() - sizeof(remote_region)));
      std::memcpy(&regions[r], e.data() + e.size() - sizeof(remote_region), sizeof(remote_region));
    }
    if (!(*t)->set_peers(addrs)) return 13;
    const int64_t deadline = now_ns() + 20'000'000'000;
    std::vector<uint32_t> imms;
    if (b.rank() == 0) {
      for (int w = 0; w < kWrites; ++w)
        if (!(*t)->write(1, *reg, buf.data() + w * kBlock, kBlock, regions[1], w * kBlock, w,
                         deadline))
          return 14;
      while ((*t)->outstanding() > 0 && now_ns() < deadline)
        if (!(*t)->progress(imms)) return 15;
      return b.allgather(all_members(b), "", 20000).ok() ? 0 : 16;
    }
    std::vector<uint32_t> order;
    while (order.size() < kWrites && now_ns() < deadline) {
      imms.clear();
      if (!(*t)->progress(imms)) return 17;
      for (uint32_t w : imms) {
        // The completion of write w: all of block w must be there.
        for (size_t i = 0; i < kBlock; ++i)
          if (buf[w * kBlock + i] != static_cast<char>(1 + w % 100)) return 18;
        order.push_back(w);
      }
    }
    if (order.size() != kWrites) return 19;
    const bool reordered = !std::is_sorted(order.begin(), order.end());
    if (!b.allgather(all_members(b), "", 20000)) return 20;
    return reordered ? 0 : 21;
  });
  EXPECT_EQ(report.exit_codes[0], 0);
  EXPECT_EQ(report.exit_codes[1], 0) << "21 means the shim delivered in posting order";
}

TEST(transport, a_required_provider_that_is_absent_is_an_error_naming_it) {
  transport_options o;
  o.provider = "efa";
  o.require_provider = true;
  auto t = open_transport(o);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.err().code, errc::provider_unavailable);
  EXPECT_NE(t.err().message.find("efa"), std::string::npos);
}

// A device region where none can exist (a build without CUDA, or no visible GPU, as here) is
// an error that says which; a transport without the per-distance paths says it has none. In
// a forked child, so this process never initialises CUDA (fabric/device_memory.h, "Fork").
TEST(transport, a_device_region_without_a_device_is_an_error_naming_why) {
  constexpr int kDevice = 77;
  auto report = launch_processes(
      1,
      [](bootstrap&) {
        if (device_count()) return kDevice;
        transport_options o;
        o.provider = "tcp";
        auto t = open_transport(o);
        if (!t) return 10;
        auto r = (*t)->allocate_device_region(4096);
        if (r || r.err().code != errc::cuda_error) return 11;
        if (r.err().message.find(cuda_build() ? "no CUDA device visible" : "no CUDA") ==
            std::string::npos)
          return 12;
        o.paths = "fabric";
        auto bare = open_transport(o);
        if (!bare) return 13;
        auto b = (*bare)->allocate_device_region(4096);
        if (b || b.err().message.find("fabric.paths auto") == std::string::npos) return 14;
        char host[16] = {};
        return device_copy(host, host + 8, 8) ? 15 : 0;
      },
      30000);
  ASSERT_TRUE(report.ok()) << report.err().to_string();
  if (report->exit_codes[0] == kDevice) GTEST_SKIP() << "a CUDA device is visible here";
  EXPECT_EQ(report->exit_codes[0], 0);
}

TEST(transport, a_write_past_the_peer_region_is_refused_before_posting) {
  transport_options o;
  o.provider = "shm";
  auto t = open_transport(o);
  ASSERT_TRUE(t.ok()) << t.err().to_string();
  std::vector<char> buf(64);
  auto r = (*t)->register_memory(buf.data(), buf.size());
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE((*t)->set_peers({(*t)->address()}).ok());
  auto st = (*t)->write(0, *r, buf.data(), 64, r->remote, 32, 0, now_ns() + 1'000'000'000);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.err().code, errc::invalid_argument);
}

// The same-host address ("MOERLDT1" | host id | pid | inbox fd | inbox address | the fabric's
// address): a peer's address cut inside any field is refused as malformed, naming why.
TEST(transport, a_peer_address_cut_short_is_malformed) {
  transport_options o;
  o.provider = "shm";
  auto t = open_transport(o);
  ASSERT_TRUE(t.ok()) << t.err().to_string();
  const std::string mine = (*t)->address();
  ASSERT_EQ(mine.substr(0, 8), "MOERLDT1") << "the test expects the distance transport";
  uint32_t id_len = 0;
  std::memcpy(&id_len, mine.data() + 8, 4);
  const size_t fields_end = 8 + 4 + id_len + 3 * 8;
  ASSERT_LE(fields_end, mine.size());
  struct cut {
    size_t size;
    const char* says;
  };
  for (const cut& c :
       {cut{4, "not ours"}, cut{8 + 4 + id_len - 1, "not ours"},
        cut{8 + 4 + id_len + 8, "short peer address"}, cut{fields_end - 1, "short peer address"}}) {
    auto st = (*t)->set_peers({mine.substr(0, c.size)});
    ASSERT_FALSE(st.ok()) << "cut at " << c.size;
    EXPECT_EQ(st.err().code, errc::malformed_message) << st.err().message;
    EXPECT_NE(st.err().message.find(c.says), std::string::npos) << st.err().message;
  }
  std::string other = mine;
  other[7] = '2';
  auto st = (*t)->set_peers({other});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("not ours"), std::string::npos) << st.err().message;
  // The whole address still parses (the fabric's part is the rest).
  EXPECT_TRUE((*t)->set_peers({mine}).ok());
}

}  // namespace
}  // namespace moerl::fabric
