// A flood of one reason gives one line per interval with the count of the rest; other
// reasons get their own lines; nothing noted is missing from the counts at the end.
#include <gtest/gtest.h>

#include "common/rate_limited_log.h"

namespace moerl {
namespace {

using namespace std::chrono_literals;

struct fake_clock {
  rate_limited_log::clock::time_point t{};
  std::function<rate_limited_log::clock::time_point()> fn() {
    return [this] { return t; };
  }
};

TEST(rate_limited_log, a_flood_gives_one_line_per_interval_per_reason_with_the_count_since) {
  fake_clock clock;
  std::vector<std::string> lines;
  {
    rate_limited_log log(
        "shard b0: dropped a frame", [&](const std::string& l) { lines.push_back(l); }, 1s,
        clock.fn());
    log.note("not a moerl message", "bad magic from p1");
    for (int i = 0; i < 999; ++i) log.note("not a moerl message", "bad magic");
    log.note("a multipart message", "3 body frames from p2");
    ASSERT_EQ(lines.size(), 2u);
    EXPECT_EQ(lines[0], "shard b0: dropped a frame: not a moerl message: bad magic from p1");
    EXPECT_EQ(lines[1], "shard b0: dropped a frame: a multipart message: 3 body frames from p2");
    clock.t += 999ms;
    log.note("not a moerl message", "still inside the interval");
    EXPECT_EQ(lines.size(), 2u);
    clock.t += 1ms;
    log.note("not a moerl message", "bad magic from p3");
    ASSERT_EQ(lines.size(), 3u);
    EXPECT_EQ(lines[2],
              "shard b0: dropped a frame: not a moerl message: bad magic from p3 (and 1000 more "
              "since the last line)");
    log.note("not a moerl message", "");
    log.note("not a moerl message", "");
    EXPECT_EQ(log.num_noted(), 1005u);
  }
  // The two suppressed at the end are reported when the log goes away.
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[3],
            "shard b0: dropped a frame: not a moerl message (and 2 more since the last line)");
}

}  // namespace
}  // namespace moerl
