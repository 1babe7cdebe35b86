// The trainer's stall clock: only time with nothing to work on counts.
#include <gtest/gtest.h>

#include "actors/wait_clock.h"

using moerl::actors::wait_clock;

TEST(wait_clock, counts_only_the_time_between_wanting_input_and_getting_it) {
  wait_clock c;
  EXPECT_FALSE(c.waiting());
  EXPECT_DOUBLE_EQ(c.waited_s(5000), 0.0);
  c.start_waiting(1000);
  c.start_waiting(1500);                    // still the same wait: its start does not move
  EXPECT_DOUBLE_EQ(c.waited_s(1800), 0.8);  // an open wait is reported as it grows
  c.stop_waiting(2000);                     // a batch arrived: 1 s waited
  EXPECT_FALSE(c.waiting());
  // Working from 2000 to 2600 is not waiting.
  EXPECT_DOUBLE_EQ(c.waited_s(2600), 1.0);
  c.start_waiting(2600);
  c.stop_waiting(2850);
  c.stop_waiting(9000);  // no open wait: nothing added
  EXPECT_DOUBLE_EQ(c.waited_s(9000), 1.25);
}

TEST(wait_clock, a_clock_that_goes_backwards_adds_nothing) {
  wait_clock c;
  c.start_waiting(1000);
  c.stop_waiting(900);
  EXPECT_DOUBLE_EQ(c.waited_s(2000), 0.0);
}
