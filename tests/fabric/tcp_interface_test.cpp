// The tcp endpoint's interface is the default route's, not whichever libfabric lists first.
// libfabric lists the fastest link first, so a veth another process made a moment ago (as
// sims/netns_link does in the root namespace) came before eth0; when that process deleted it,
// our endpoints had lost their address: lazy connects failed in fi_writemsg ("Cannot assign
// requested address") and writes to them never arrived (python_ep_low_latency_test's
// reordered-tcp case, 2 of ~65 runs beside other helpers' netns tests).
//
// In a private network namespace (nothing outside it sees these interfaces): veth "stable0"
// carries the default route; a newer veth "trans0", which libfabric 1.17 lists first, comes
// and goes. Two endpoints open while it exists, it is deleted, and writes between them (and
// from one to itself) must still land.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/child_process.h"
#include "fabric/bootstrap.h"
#include "fabric/transport.h"
#include "sims/process_control.h"
#include "tests/fabric/region_exchange.h"

namespace moerl::fabric {
namespace {

constexpr int skip_code = 77;

int fail(int code, const std::string& why) {
  std::fprintf(stderr, "tcp_interface_test: %s\n", why.c_str());
  return code;
}

status ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"ip"};
  argv.insert(argv.end(), args.begin(), args.end());
  return sims::run_tool(argv);
}

// A veth pair, both ends up, `address` on the first end.
status add_veth(const std::string& name, const std::string& peer, const std::string& address) {
  if (auto st = ip({"link", "add", name, "type", "veth", "peer", "name", peer}); !st) return st;
  if (auto st = ip({"addr", "add", address, "dev", name}); !st) return st;
  if (auto st = ip({"link", "set", name, "up"}); !st) return st;
  return ip({"link", "set", peer, "up"});
}

// One rank: its endpoint on the default route's interface; after both endpoints are open and
// have each other's address, rank 0 deletes trans0 (the other process is done with its
// veth), and every rank writes a block to every rank: each write's lazy connect binds to the
// endpoint's address then.
int exchange(bootstrap& b) {
  transport_options o;
  o.provider = "tcp";
  o.require_provider = true;
  auto t = open_transport(o);
  if (!t) return fail(12, "open_transport: " + t.err().message);
  if ((*t)->describe().domain != "stable0")
    return fail(13, "endpoint on interface '" + (*t)->describe().domain +
                        "', not the default route's (stable0)");
  const int n = b.size();
  constexpr size_t block = 4096;
  std::vector<char> src(block, static_cast<char>('a' + b.rank())), dst(n * block, 0);
  auto s = (*t)->register_memory(src.data(), src.size());
  auto d = (*t)->register_memory(dst.data(), dst.size());
  if (!s || !d) return fail(14, "register_memory failed");
  auto regions_of = test::exchange_regions(b, **t, {d->remote});
  if (!regions_of) return fail(15, "exchange_regions: " + regions_of.err().message);
  if (b.rank() == 0)
    if (auto st = ip({"link", "del", "trans0"}); !st) return fail(17, st.err().message);
  if (!b.allgather(all_members(b), "", 10000)) return fail(18, "barrier failed");

  const int64_t deadline = now_ns() + 10'000'000'000;
  for (int peer = 0; peer < n; ++peer)
    if (auto st = (*t)->write(peer, *s, src.data(), block, (*regions_of)[peer][0], b.rank() * block,
                              static_cast<uint32_t>(b.rank()), deadline);
        !st)
      return fail(19, "write " + std::to_string(b.rank()) + " -> " + std::to_string(peer) + ": " +
                          st.err().message);
  std::vector<uint32_t> imms;
  while (imms.size() < static_cast<size_t>(n) || (*t)->outstanding() > 0) {
    if (now_ns() > deadline)
      return fail(21, "rank " + std::to_string(b.rank()) + ": " + std::to_string(imms.size()) +
                          " of " + std::to_string(n) + " immediates after 10 s");
    if (auto st = (*t)->progress(imms); !st) return fail(22, st.err().message);
  }
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < block; ++i)
      if (dst[r * block + i] != static_cast<char>('a' + r))
        return fail(23, "rank " + std::to_string(r) + "'s block is not where it wrote it");
  // Nobody leaves before everyone has checked: a peer's endpoint must outlive our writes.
  if (!b.allgather(all_members(b), "", 10000)) return fail(24, "final barrier failed");
  return 0;
}

// Runs in a child that has its own network namespace.
int body() {
  if (::unshare(CLONE_NEWNET) != 0)
    return fail(skip_code, std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno));
  if (auto st = ip({"link", "set", "lo", "up"}); !st) return fail(skip_code, st.err().message);
  if (auto st = add_veth("stable0", "stable1", "192.0.2.1/24"); !st)
    return fail(skip_code, "cannot make a veth pair: " + st.err().message);
  if (auto st = ip({"route", "add", "default", "dev", "stable0"}); !st)
    return fail(10, st.err().message);
  if (auto st = add_veth("trans0", "trans1", "198.51.100.1/30"); !st)
    return fail(11, st.err().message);

  // Two ranks on threads; each writes a block to the other and one to itself (the
  // reordered-tcp case sends to itself through tcp too).
  auto report = launch_threads(2, [](bootstrap& b) { return exchange(b); });
  for (int r = 0; r < 2; ++r)
    if (report.exit_codes[r] != 0)
      return fail(
          20, "rank " + std::to_string(r) + " ended with " + std::to_string(report.exit_codes[r]));
  return 0;
}

TEST(tcp_interface, endpoints_use_the_default_routes_interface_and_outlive_a_deleted_veth) {
  if (::geteuid() != 0) GTEST_SKIP() << "tcp_interface_test skipped: network namespaces need root";
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ::_exit(body());
  int wait_status = 0;
  ASSERT_EQ(::waitpid(pid, &wait_status, 0), pid);
  ASSERT_TRUE(WIFEXITED(wait_status)) << describe_wait_status(wait_status);
  if (WEXITSTATUS(wait_status) == skip_code)
    GTEST_SKIP() << "tcp_interface_test skipped: no private network namespace with veth pairs "
                    "here (see stderr)";
  EXPECT_EQ(WEXITSTATUS(wait_status), 0) << "see the child's message on stderr";
}

}  // namespace
}  // namespace moerl::fabric
