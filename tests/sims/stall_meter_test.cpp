// The run's trainer stall total from per-poll `stall_s` figures: growth per trainer, restarts
// (the clock starts again at 0) and replacements counted, re-join duplicates not; and the
// share of it that falls in a fault's window.
#include <gtest/gtest.h>

#include "sims/stall_meter.h"

namespace moerl::sims {
namespace {

node_view trainer(const std::string& id, const std::string& name, double stall_s,
                  const std::string& state = "running") {
  node_view n;
  n.id = id;
  n.name = name;
  n.role = "trainer";
  n.state = state;
  n.stats = {{"stall_s", stall_s}};
  return n;
}

TEST(stall_meter, counts_only_waiting_after_the_first_poll) {
  stall_meter m;
  m.observe(0, {trainer("t1", "trainer-0", 4.0)});  // 4 s waited before the run was watched
  EXPECT_TRUE(m.reported());
  EXPECT_DOUBLE_EQ(m.total_s(), 0.0);
  m.observe(1, {trainer("t1", "trainer-0", 4.5)});
  m.observe(2, {trainer("t1", "trainer-0", 6.0)});
  EXPECT_DOUBLE_EQ(m.total_s(), 2.0);
}

TEST(stall_meter, a_restarted_trainer_group_starts_again_at_zero) {
  stall_meter m;
  m.observe(0, {trainer("t1", "trainer-0", 1.0)});
  m.observe(2, {trainer("t1", "trainer-0", 3.0)});  // +2
  m.observe(3, {trainer("t1", "trainer-0", 0.5)});  // restarted: +0.5
  m.observe(4, {trainer("t1", "trainer-0", 1.5)});  // +1
  EXPECT_DOUBLE_EQ(m.total_s(), 3.5);
}

TEST(stall_meter, a_replacement_counts_in_full_and_a_dead_entry_adds_nothing) {
  stall_meter m;
  m.observe(0, {trainer("t1", "trainer-0", 1.0)});
  m.observe(1, {trainer("t1", "trainer-0", 2.0)});  // +1
  // The old process is listed dead with its last figures; the replacement (new id) has
  // waited 0.7 s since it started, during the run.
  m.observe(2, {trainer("t1", "trainer-0", 2.0, "dead"), trainer("t2", "trainer-0-r1", 0.7)});
  m.observe(3, {trainer("t1", "trainer-0", 2.0, "dead"), trainer("t2", "trainer-0-r1", 1.2)});
  EXPECT_DOUBLE_EQ(m.total_s(), 1.0 + 0.7 + 0.5);
}

TEST(stall_meter, late_figures_are_spread_over_the_gap_not_charged_to_the_poll_that_saw_them) {
  stall_meter m;
  m.observe(0, {trainer("t1", "trainer-0", 0.0)});
  m.observe(1, {trainer("t1", "trainer-0", 0.5)});  // 0.5 s in [0, 1]
  // The console listed the trainer without figures from 1 s to 9 s (a restarted coordinator
  // waiting for its next report); then 8 s more waiting shows up at once.
  node_view quiet = trainer("t1", "trainer-0", 0);
  quiet.stats = nullptr;
  for (int t = 2; t < 9; ++t) m.observe(t, {quiet});
  m.observe(9, {trainer("t1", "trainer-0", 8.5)});
  EXPECT_DOUBLE_EQ(m.total_s(), 8.5);
  // A fault injected at 8 s is charged only the waiting that fell after it.
  EXPECT_DOUBLE_EQ(m.between(8, 9), 1.0);
  EXPECT_DOUBLE_EQ(m.between(0, 1), 0.5);
  EXPECT_DOUBLE_EQ(m.between(0, 9), 8.5);
  EXPECT_DOUBLE_EQ(m.between(20, 30), 0.0);
}

TEST(stall_meter, one_trainer_is_charged_at_most_one_second_per_second) {
  stall_meter m;
  m.observe(0, {trainer("t1", "trainer-0", 0.0)});
  // Figures are read at polls, not when the trainer sent them: 1.5 s of growth between
  // polls 1 s apart means the waiting began at least 1.5 s before the second poll.
  m.observe(1, {trainer("t1", "trainer-0", 0.2)});
  m.observe(2, {trainer("t1", "trainer-0", 1.7)});
  EXPECT_DOUBLE_EQ(m.between(1, 2), 1.0);
  EXPECT_DOUBLE_EQ(m.between(0, 2), 1.7);
}

TEST(stall_meter, trainers_without_the_figure_are_not_reported) {
  stall_meter m;
  node_view old = trainer("t1", "trainer-0", 0);
  old.stats = {{"batches", 3}};
  node_view rollout = trainer("r1", "rollout-0", 9.0);
  rollout.role = "rollout";
  m.observe(0, {old, rollout});
  m.observe(1, {old, rollout});
  EXPECT_FALSE(m.reported());
  EXPECT_DOUBLE_EQ(m.total_s(), 0.0);
}

}  // namespace
}  // namespace moerl::sims
