// advertised_endpoint: a wildcard bind is advertised under this host's address, anything
// else unchanged, and a malformed endpoint is refused by name.
#include "common/advertised_endpoint.h"

#include <gtest/gtest.h>

namespace moerl {
namespace {

TEST(advertised_endpoint, KeepsASpecificAddress) {
  auto ep = advertised_endpoint("tcp://127.0.0.1:4242");
  ASSERT_TRUE(ep) << ep.err().message;
  EXPECT_EQ(*ep, "tcp://127.0.0.1:4242");
}

TEST(advertised_endpoint, ReplacesTheWildcardByThisHostsAddress) {
  auto ep = advertised_endpoint("tcp://0.0.0.0:4242");
  ASSERT_TRUE(ep) << ep.err().message;
  EXPECT_NE(ep->find("tcp://"), std::string::npos);
  EXPECT_EQ(ep->find("0.0.0.0"), std::string::npos) << *ep;
  EXPECT_EQ(ep->substr(ep->size() - 5), ":4242") << *ep;
}

TEST(advertised_endpoint, RefusesAnEndpointThatIsNotTcpHostPort) {
  for (const char* bad : {"ipc:///tmp/x", "tcp://", "4242"}) {
    auto ep = advertised_endpoint(bad);
    ASSERT_FALSE(ep) << bad;
    EXPECT_EQ(ep.err().code, errc::invalid_argument);
    EXPECT_NE(ep.err().message.find(bad), std::string::npos) << ep.err().message;
  }
}

}  // namespace
}  // namespace moerl
