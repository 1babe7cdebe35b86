// secret_equals: equal only for the same bytes and length, whatever is presented.
#include "common/secret_compare.h"

#include <gtest/gtest.h>

namespace moerl {
namespace {

TEST(secret_equals, SameBytesAndLengthOnly) {
  EXPECT_TRUE(secret_equals("moerl-operator", "moerl-operator"));
  EXPECT_FALSE(secret_equals("moerl-operatoR", "moerl-operator"));
  EXPECT_FALSE(secret_equals("Moerl-operator", "moerl-operator"));
  EXPECT_FALSE(secret_equals("moerl-operator-", "moerl-operator"));  // the secret as a prefix
  EXPECT_FALSE(secret_equals("moerl-operat", "moerl-operator"));     // a prefix of the secret
  EXPECT_FALSE(secret_equals("", "moerl-operator"));
  // The secret repeated: the index wraps, the length still differs.
  EXPECT_FALSE(secret_equals("abab", "ab"));
  EXPECT_FALSE(secret_equals("x", ""));
  EXPECT_TRUE(secret_equals("", ""));
  EXPECT_FALSE(secret_equals(std::string_view("a\0b", 3), std::string_view("a\0c", 3)));
}

}  // namespace
}  // namespace moerl
