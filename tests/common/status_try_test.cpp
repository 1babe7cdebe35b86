// STATUS_TRY and ASSIGN_OR_RETURN: a value passes through, an error returns with its code and
// its message prefixed by the step, file and line.
#include "common/status_try.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

namespace moerl {
namespace {

result<int> parse_count(const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
    return error{errc::invalid_argument, "count '" + text + "' is not a number"};
  return std::stoi(text);
}

result<std::unique_ptr<int>> boxed(int v) {
  if (v < 0) return error{errc::not_found, "nothing to box"};
  return std::make_unique<int>(v);
}

int parse_calls = 0;
result<int> counted_parse(const std::string& text) {
  ++parse_calls;
  return parse_count(text);
}

// Two uses in one scope (the temporaries are named by line), and the second is skipped when
// the first fails.
result<int> sum_of(const std::string& a, const std::string& b) {
  ASSIGN_OR_RETURN(const int x, counted_parse(a));
  ASSIGN_OR_RETURN(int y, counted_parse(b));
  return x + y;
}

// A move-only value, assigned to a variable declared earlier.
result<int> unbox(int v) {
  std::unique_ptr<int> p;
  ASSIGN_OR_RETURN(p, boxed(v));
  return *p + 1;
}

// Into a status-returning function.
status check_positive(const std::string& text, int* out) {
  ASSIGN_OR_RETURN(*out, parse_count(text));
  if (*out == 0) return error{errc::invalid_argument, "count is zero"};
  return ok_status();
}

status require_positive(const std::string& text) {
  int value = 0;
  STATUS_TRY(check_positive(text, &value));
  return ok_status();
}

TEST(AssignOrReturn, AssignsTheValueOfEachSuccessfulResult) {
  parse_calls = 0;
  auto r = sum_of("12", "30");
  ASSERT_TRUE(r.ok()) << r.err().to_string();
  EXPECT_EQ(*r, 42);
  EXPECT_EQ(parse_calls, 2);

  auto u = unbox(6);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(*u, 7);

  int out = -1;
  ASSERT_TRUE(check_positive("9", &out).ok());
  EXPECT_EQ(out, 9);
}

TEST(AssignOrReturn, ReturnsTheFirstErrorWithItsCodeAndAPrefixedMessage) {
  parse_calls = 0;
  auto r = sum_of("1x", "30");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(parse_calls, 1) << "the second step ran after the first failed";
  EXPECT_EQ(r.err().code, errc::invalid_argument);
  const std::string& m = r.err().message;
  // "<step> (<file>:<line>): <original message>"
  EXPECT_EQ(m.rfind("counted_parse (", 0), 0u) << m;
  EXPECT_NE(m.find("status_try_test.cpp:"), std::string::npos) << m;
  const std::string tail = "): count '1x' is not a number";
  ASSERT_GE(m.size(), tail.size()) << m;
  EXPECT_EQ(m.substr(m.size() - tail.size()), tail) << m;

  // The second step's failure names the second step's line, not the first's.
  auto r2 = sum_of("1", "y");
  ASSERT_FALSE(r2.ok());
  const std::string line_a = r.err().message.substr(0, r.err().message.find("): "));
  const std::string line_b = r2.err().message.substr(0, r2.err().message.find("): "));
  EXPECT_NE(line_a, line_b);
  EXPECT_NE(r2.err().message.find("count 'y' is not a number"), std::string::npos);

  auto u = unbox(-1);
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.err().code, errc::not_found);
  EXPECT_EQ(u.err().message.rfind("boxed (", 0), 0u) << u.err().message;
  EXPECT_NE(u.err().message.find("): nothing to box"), std::string::npos) << u.err().message;

  int out = -1;
  auto st = check_positive("", &out);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.err().code, errc::invalid_argument);
  EXPECT_EQ(out, -1) << "the target was written although the result failed";
}

TEST(StatusTry, PrefixesTheErrorAndPassesSuccess) {
  EXPECT_TRUE(require_positive("5").ok());
  auto st = require_positive("0");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.err().code, errc::invalid_argument);
  EXPECT_EQ(st.err().message.rfind("check_positive (", 0), 0u) << st.err().message;
  EXPECT_NE(st.err().message.find("): count is zero"), std::string::npos) << st.err().message;
}

}  // namespace
}  // namespace moerl
