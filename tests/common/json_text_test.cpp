// json_text (common/json_text.h): JSON text of strings a peer sent never throws. The live-port
// fuzzer once stopped the coordinator with a node name holding invalid UTF-8, which plain
// nlohmann::json::dump() refuses with an exception.
#include "common/json_text.h"

#include <gtest/gtest.h>

TEST(json_text, invalid_utf8_is_replaced_not_thrown) {
  const nlohmann::json j{{"node", std::string("rollout-\xff\xfe-0")}, {"n", 3}};
  EXPECT_THROW((void)j.dump(), nlohmann::json::type_error);
  const std::string text = moerl::json_text(j);
  EXPECT_NE(text.find("rollout-\xef\xbf\xbd"), std::string::npos) << text;  // U+FFFD
  auto back = nlohmann::json::parse(text);
  EXPECT_EQ(back["n"], 3);
}

TEST(json_text, valid_text_is_unchanged) {
  const nlohmann::json j{{"node", "trainer-0"}, {"list", {1, 2}}, {"u", "\xc3\xa9"}};
  EXPECT_EQ(moerl::json_text(j), j.dump());
  EXPECT_EQ(moerl::json_text(j, 2), j.dump(2));
}
