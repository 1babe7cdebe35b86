// The reward curve a checkpoint carries (job/checkpointed_curve.h): full segments written once
// and named by content, a manifest that stays small however long the run, a resume that reads
// the curve back from either layout, and a damaged segment that costs its entries, not the
// resume.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "job/checkpointed_curve.h"
#include "job/shard_checkpointer.h"
#include "store/checkpoint.h"
#include "store/local_store.h"
#include "tests/support/temp_dir.h"

namespace moerl::job {
namespace {

using nlohmann::json;

std::vector<json> curve_of(size_t n) {
  std::vector<json> c;
  for (size_t i = 1; i <= n; ++i)
    c.push_back({{"iteration", i}, {"mean_reward", double(i % 7) / 7.0}, {"samples", 128}});
  return c;
}

class checkpointed_curve_test : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::local_store::open(dir_.path(), true);
    ASSERT_TRUE(s.ok()) << s.err().to_string();
    store_ = std::shared_ptr<store::object_store>(std::move(*s));
  }
  // A checkpoint of `curve` by a run under "run": its meta, with its segments in the store.
  json stored_meta(const std::vector<json>& curve, std::vector<named_object>* written) {
    checkpointed_curve writer("run");
    const json meta = writer.meta(curve, written);
    for (const auto& o : *written) EXPECT_TRUE(store_->put(o.key, o.bytes).ok()) << o.key;
    return meta;
  }
  ::moerl::testing::temp_dir dir_;
  std::shared_ptr<store::object_store> store_;
};

TEST_F(checkpointed_curve_test, full_segments_are_cut_once_and_the_rest_rides_in_the_meta) {
  checkpointed_curve c("run");
  std::vector<named_object> w;
  json m = c.meta(curve_of(kCurveSegmentEntries - 1), &w);
  EXPECT_TRUE(w.empty());
  EXPECT_EQ(m["reward_curve_segments"].size(), 0u);
  EXPECT_EQ(m["reward_curve_tail"].size(), kCurveSegmentEntries - 1);
  EXPECT_FALSE(m.contains("reward_curve"));

  m = c.meta(curve_of(2 * kCurveSegmentEntries + 7), &w);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(m["reward_curve_segments"].size(), 2u);
  EXPECT_EQ(m["reward_curve_tail"].size(), 7u);
  EXPECT_EQ(m["reward_curve_tail"][0]["iteration"], 2 * kCurveSegmentEntries + 1);
  EXPECT_EQ(w[0].key.rfind("run/reward-curve/000000000000-", 0), 0u) << w[0].key;
  EXPECT_EQ(m["reward_curve_segments"][1]["key"], w[1].key);

  w.clear();
  c.meta(curve_of(2 * kCurveSegmentEntries + 9), &w);
  EXPECT_TRUE(w.empty()) << "a segment already cut is not written again";
  c.meta(curve_of(3 * kCurveSegmentEntries), &w);
  EXPECT_EQ(w.size(), 1u);
}

TEST_F(checkpointed_curve_test, the_manifest_stays_small_on_a_long_run) {
  const auto curve = curve_of(4000);
  checkpointed_curve c("run");
  std::vector<named_object> w;
  const std::string meta = c.meta(curve, &w).dump();
  const std::string whole = json(curve).dump();
  // 80 segment references (~130 bytes each) against 4,000 entries (~60 bytes each).
  EXPECT_LT(meta.size() * 15, whole.size()) << meta.size() << " against " << whole.size();
  EXPECT_EQ(w.size(), 4000 / kCurveSegmentEntries);
}

TEST_F(checkpointed_curve_test, a_resume_reads_back_the_curve_and_cuts_only_new_segments) {
  const auto curve = curve_of(2 * kCurveSegmentEntries + 3);
  std::vector<named_object> w;
  const json meta = stored_meta(curve, &w);

  checkpointed_curve reader("resumed-run");
  std::vector<std::string> warnings;
  auto back = reader.restore(*store_, meta, &warnings);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  EXPECT_EQ(json(back), json(curve));

  auto longer = back;
  for (const auto& e : curve_of(3 * kCurveSegmentEntries))
    if (e["iteration"].get<size_t>() > back.size()) longer.push_back(e);
  w.clear();
  const json next = reader.meta(longer, &w);
  ASSERT_EQ(w.size(), 1u) << "the restored segments are referenced, not written again";
  EXPECT_EQ(w[0].key.rfind("resumed-run/reward-curve/", 0), 0u) << w[0].key;
  EXPECT_EQ(next["reward_curve_segments"][0], meta["reward_curve_segments"][0]);
}

TEST_F(checkpointed_curve_test, a_checkpoint_written_before_segments_resumes_its_whole_curve) {
  const auto curve = curve_of(kCurveSegmentEntries + 4);
  checkpointed_curve c("run");
  auto back = c.restore(*store_, json{{"reward_curve", curve}}, nullptr);
  EXPECT_EQ(json(back), json(curve));
  std::vector<named_object> w;
  c.meta(back, &w);
  EXPECT_EQ(w.size(), 1u) << "its full segment goes to the store at the next checkpoint";
}

TEST_F(checkpointed_curve_test, a_named_list_rides_beside_the_curve_in_its_own_fields_and_folder) {
  // The iterations' timings: a second list in the same manifest, neither list's fields or
  // segments mixed with the other's.
  checkpointed_curve curve("run"), timings("run", "iteration_timings");
  std::vector<named_object> w;
  json meta = curve.meta(curve_of(kCurveSegmentEntries + 2), &w);
  meta.update(timings.meta(curve_of(kCurveSegmentEntries + 1), &w));
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].key.rfind("run/reward-curve/000000000000-", 0), 0u) << w[0].key;
  EXPECT_EQ(w[1].key.rfind("run/iteration-timings/000000000000-", 0), 0u) << w[1].key;
  EXPECT_EQ(meta["reward_curve_tail"].size(), 2u);
  EXPECT_EQ(meta["iteration_timings_tail"].size(), 1u);
  for (const auto& o : w) ASSERT_TRUE(store_->put(o.key, o.bytes).ok()) << o.key;

  checkpointed_curve back_curve("run"), back_timings("run", "iteration_timings");
  std::vector<std::string> warnings;
  EXPECT_EQ(json(back_timings.restore(*store_, meta, &warnings)),
            json(curve_of(kCurveSegmentEntries + 1)));
  EXPECT_EQ(json(back_curve.restore(*store_, meta, &warnings)),
            json(curve_of(kCurveSegmentEntries + 2)));
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  // A checkpoint written before the timings were carried resumes with none, and no warning.
  EXPECT_TRUE(
      back_timings.restore(*store_, json{{"reward_curve", curve_of(3)}}, &warnings).empty());
  EXPECT_TRUE(warnings.empty()) << warnings.front();
}

TEST_F(checkpointed_curve_test, a_damaged_segment_costs_its_entries_and_is_named) {
  const auto curve = curve_of(3 * kCurveSegmentEntries + 2);
  std::vector<named_object> w;
  const json meta = stored_meta(curve, &w);
  ASSERT_TRUE(store_->put(w[1].key, "[]").ok());  // the middle segment's bytes replaced

  checkpointed_curve reader("run");
  std::vector<std::string> warnings;
  auto back = reader.restore(*store_, meta, &warnings);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(w[1].key), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("sha256"), std::string::npos) << warnings[0];
  EXPECT_EQ(back.size(), curve.size() - kCurveSegmentEntries);
  EXPECT_EQ(back[kCurveSegmentEntries]["iteration"], 2 * kCurveSegmentEntries + 1);
  // The positions moved: the next checkpoint cuts every segment afresh from what was read.
  w.clear();
  reader.meta(back, &w);
  EXPECT_EQ(w.size(), 2u);
}

TEST_F(checkpointed_curve_test, the_checkpointer_puts_the_segments_before_the_commit_names_them) {
  shard_checkpointer ckpt(store_, "run/checkpoints", 0, 1, 0, 1);
  checkpointed_curve c("run");
  std::vector<named_object> w;
  json meta = c.meta(curve_of(kCurveSegmentEntries + 1), &w);
  meta["policy_version"] = 1;
  ckpt.submit(1, {{"rank-0/params", "p"}, {"rank-0/adam", "a"}}, meta, w);
  ASSERT_TRUE(ckpt.throttle(1).ok());
  auto m = store::latest_committed(*store_, "run/checkpoints");
  ASSERT_TRUE(m.ok()) << m.err().to_string();
  checkpointed_curve reader("run");
  std::vector<std::string> warnings;
  auto back = reader.restore(*store_, m->meta, &warnings);
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(json(back), json(curve_of(kCurveSegmentEntries + 1)));
}

}  // namespace
}  // namespace moerl::job
