// hex_encode / hex_decode: every byte value round-trips; bad text is refused by name.
#include "common/hex.h"

#include <gtest/gtest.h>

namespace moerl {
namespace {

TEST(hex, EveryByteRoundTrips) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::string text = hex_encode(all);
  ASSERT_EQ(text.size(), 512u);
  EXPECT_EQ(text.substr(0, 6), "000102");
  EXPECT_EQ(text.substr(508), "feff");
  auto back = hex_decode(text, "bytes");
  ASSERT_TRUE(back) << back.err().message;
  EXPECT_EQ(*back, all);
}

TEST(hex, KnownValuesAndUpperCase) {
  EXPECT_EQ(hex_encode(std::string_view("\x12\xab\x00", 3)), "12ab00");
  EXPECT_EQ(hex_encode(""), "");
  auto up = hex_decode("12AB00", "x");
  ASSERT_TRUE(up);
  EXPECT_EQ(*up, std::string("\x12\xab\x00", 3));
}

TEST(hex, BadTextIsRefusedByName) {
  auto odd = hex_decode("abc", "fabric_address");
  ASSERT_FALSE(odd);
  EXPECT_EQ(odd.err().code, errc::malformed_message);
  EXPECT_NE(odd.err().message.find("fabric_address has 3 hex digits"), std::string::npos)
      << odd.err().message;
  auto bad = hex_decode("0g", "fabric_address");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.err().message.find("fabric_address is not hex (at character 1)"), std::string::npos)
      << bad.err().message;
}

}  // namespace
}  // namespace moerl
