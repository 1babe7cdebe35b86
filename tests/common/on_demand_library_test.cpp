// common/on_demand_library.h: a library opened at first use, a clear error when it cannot be,
// and the `moerl` binary naming none of the libraries moerl opens that way (else every process
// start pays for them again: ~0.45 s each, common/on_demand_library.h).
#include "common/on_demand_library.h"

#include <csignal>
#include <cstdio>
#include <string>

#include <gtest/gtest.h>

namespace moerl {
namespace {

TEST(OnDemandLibrary, OpensAtFirstUseAndFindsItsSymbols) {
  on_demand_library lib({"libmoerl-no-such-library.so.7", "libm.so.6"}, "a test (libm)");
  using cos_fn = double(double);
  auto* f = on_demand_symbol<cos_fn>(lib, "cos");
  ASSERT_NE(f, nullptr);
  EXPECT_DOUBLE_EQ(f(0.0), 1.0);
  EXPECT_EQ(lib.loaded_from(), "libm.so.6");  // the first name is missing, the second opens
  EXPECT_EQ(lib.load_error(), "");
  EXPECT_EQ(lib.symbol("moerl_no_such_symbol"), nullptr);
}

TEST(OnDemandLibrary, AMissingLibraryIsAnErrorNamingItAndWhatNeededIt) {
  on_demand_library lib({"libmoerl-no-such-library.so.7"}, "the test's fabric");
  EXPECT_EQ(lib.symbol("fi_getinfo"), nullptr);
  const std::string e = lib.load_error();
  EXPECT_NE(e.find("the test's fabric"), std::string::npos) << e;
  EXPECT_NE(e.find("libmoerl-no-such-library.so.7"), std::string::npos) << e;
  EXPECT_EQ(lib.loaded_from(), "");
}

void test_handler(int) {}

// libfabric (Debian's) loads libinfinipath, whose constructor installs its own SIGTERM, SIGINT,
// SIGSEGV... handlers: opening it on demand must leave the process's handlers as they were (a
// node draining on SIGTERM exited with code 1 instead while it did not). This test binary does
// not link libfabric, so the open here is the first.
TEST(OnDemandLibrary, OpeningALibraryLeavesTheSignalHandlersAsTheyWere) {
  struct sigaction mine {};
  mine.sa_handler = test_handler;
  sigemptyset(&mine.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGSEGV}) ASSERT_EQ(sigaction(sig, &mine, nullptr), 0);
  on_demand_library lib({"libfabric.so.1"}, "the test's fabric");
  ASSERT_NE(lib.symbol("fi_getinfo"), nullptr) << lib.load_error();
  for (int sig : {SIGTERM, SIGINT, SIGSEGV}) {
    struct sigaction now {};
    ASSERT_EQ(sigaction(sig, nullptr, &now), 0);
    EXPECT_EQ(now.sa_handler, &test_handler) << "signal " << sig << " was changed by the open";
  }
}

// The dynamic section of the moerl binary (readelf, binutils) names no library that moerl opens
// on demand.
TEST(OnDemandLibrary, TheMoerlBinaryDoesNotLinkThem) {
  const std::string cmd = std::string("readelf -d '") + MOERL_BINARY + "'";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  ASSERT_EQ(pclose(p), 0) << cmd;
  ASSERT_NE(out.find("(NEEDED)"), std::string::npos) << out;  // it is dynamically linked
  for (const char* lib : {"libfabric", "libcublas", "libnccl", "libpsm", "libinfinipath"})
    EXPECT_EQ(out.find(lib), std::string::npos) << lib << " is linked:\n" << out;
}

}  // namespace
}  // namespace moerl
