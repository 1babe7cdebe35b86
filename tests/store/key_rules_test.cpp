// Key and prefix validation: the rules every backend applies before touching storage.
#include <gtest/gtest.h>

#include "store/key_rules.h"

namespace moerl::store {
namespace {

void expect_rejected(const std::string& key, const std::string& reason_part) {
  auto st = validate_key(key);
  ASSERT_FALSE(st.ok()) << "key '" << key << "' was accepted";
  EXPECT_EQ(st.err().code, errc::invalid_argument);
  EXPECT_NE(st.err().message.find(reason_part), std::string::npos) << st.err().message;
}

TEST(store_key_rules, ordinary_keys_are_accepted) {
  for (const char* k : {"a", "ckpt/step-000001/manifest.json", "a b/c+d=e", "x/..y/z.",
                        "utf8/\xc3\xa9t\xc3\xa9", "dots/.hidden"}) {
    EXPECT_TRUE(validate_key(k).ok()) << k << ": " << validate_key(k).err().message;
  }
}

TEST(store_key_rules, traversal_and_absolute_paths_are_rejected_with_the_reason) {
  expect_rejected("", "empty");
  expect_rejected("..", "'..'");
  expect_rejected("a/../b", "'..'");
  expect_rejected("a/./b", "'.'");
  expect_rejected("/etc/passwd", "absolute");
  expect_rejected("a//b", "empty path segment");
  expect_rejected("a/", "empty path segment");
  expect_rejected("a/b\n", "control character");
  expect_rejected(std::string("a\0b", 3), "control character");
  expect_rejected("x/.moerl-tmp-1", "reserved");
  expect_rejected(std::string(1025, 'k'), "longer than 1024");
}

TEST(store_key_rules, error_names_the_offending_key) {
  auto st = validate_key("runs/../../escape");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("runs/../../escape"), std::string::npos);
}

TEST(store_key_rules, prefixes_may_end_mid_segment_or_with_a_slash) {
  for (const char* p : {"", "a", "a/", "ckpt/step-", "a/.", "a/.."}) {
    EXPECT_TRUE(validate_prefix(p).ok()) << p << ": " << validate_prefix(p).err().message;
  }
  for (const char* p : {"/a", "../", "a/../b", "a//b", "a/./"}) {
    EXPECT_FALSE(validate_prefix(p).ok()) << "prefix '" << p << "' was accepted";
  }
}

}  // namespace
}  // namespace moerl::store
