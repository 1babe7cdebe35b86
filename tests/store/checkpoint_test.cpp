// Checkpoints on the local store: the write protocol, and that latest_committed never
// returns a torn checkpoint (missing marker, missing or corrupted part, broken manifest,
// a marker that vouches for other content), falling back to the newest intact one.
#include <gtest/gtest.h>

#include "store/checkpoint.h"
#include "store/digest.h"
#include "store/local_store.h"
#include "tests/support/temp_dir.h"

namespace moerl::store {
namespace {

class checkpoint_test : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = local_store::open(dir_.path(), true);
    ASSERT_TRUE(s.ok()) << s.err().to_string();
    store_ = std::move(s.value());
  }
  std::vector<checkpoint_part> parts_for(uint64_t step) {
    return {{"experts/0.bin", std::string(1000 + step, static_cast<char>('a' + step % 26))},
            {"dense.bin", "dense weights at step " + std::to_string(step)},
            {"optimizer/state", std::string(10, '\0') + std::to_string(step)}};
  }
  void write(uint64_t step) {
    auto m = write_checkpoint(*store_, prefix_, step, parts_for(step), {{"iteration", step}});
    ASSERT_TRUE(m.ok()) << m.err().to_string();
  }
  std::string key(uint64_t step, const std::string& rest) {
    return checkpoint_dir(prefix_, step) + "/" + rest;
  }
  uint64_t latest_step() {
    auto m = latest_committed(*store_, prefix_);
    EXPECT_TRUE(m.ok()) << m.err().to_string();
    return m.ok() ? m->step : ~0ull;
  }

  ::moerl::testing::temp_dir dir_;
  std::unique_ptr<local_store> store_;
  const std::string prefix_ = "runs/r1/ckpt";
};

TEST_F(checkpoint_test, written_checkpoint_has_parts_manifest_and_marker_and_reads_back) {
  auto m = write_checkpoint(*store_, prefix_, 7, parts_for(7), {{"policy_version", 3}});
  ASSERT_TRUE(m.ok()) << m.err().to_string();
  EXPECT_EQ(store_->list(checkpoint_dir(prefix_, 7) + "/").value(),
            (std::vector<std::string>{key(7, "COMMITTED"), key(7, "manifest.json"),
                                      key(7, "parts/dense.bin"), key(7, "parts/experts/0.bin"),
                                      key(7, "parts/optimizer/state")}));
  EXPECT_EQ(store_->get(key(7, "COMMITTED")).value(), m->content_hash);
  ASSERT_EQ(m->parts.size(), 3u);
  EXPECT_EQ(m->parts[0].name, "dense.bin");  // sorted by name
  EXPECT_EQ(m->parts[0].sha256, sha256_hex("dense weights at step 7"));

  auto latest = latest_committed(*store_, prefix_);
  ASSERT_TRUE(latest.ok()) << latest.err().to_string();
  EXPECT_EQ(latest->step, 7u);
  EXPECT_EQ(latest->content_hash, m->content_hash);
  EXPECT_EQ(latest->meta["policy_version"], 3);
  auto parts = read_checkpoint(*store_, prefix_, latest.value());
  ASSERT_TRUE(parts.ok()) << parts.err().to_string();
  const auto want = parts_for(7);
  ASSERT_EQ(parts->size(), 3u);
  for (const auto& w : want) {
    auto it = std::find_if(parts->begin(), parts->end(),
                           [&](const checkpoint_part& p) { return p.name == w.name; });
    ASSERT_NE(it, parts->end()) << w.name;
    EXPECT_EQ(it->bytes, w.bytes) << w.name;
  }
}

TEST_F(checkpoint_test, load_latest_returns_the_newest_intact_checkpoint_with_its_parts) {
  write(1);
  write(2);
  write(3);
  ASSERT_TRUE(store_->put(key(3, "parts/dense.bin"), "torn").ok());
  auto loaded = load_latest_committed(*store_, prefix_);
  ASSERT_TRUE(loaded.ok()) << loaded.err().to_string();
  EXPECT_EQ(loaded->manifest.step, 2u);
  ASSERT_EQ(loaded->parts.size(), 3u);  // only step 2's parts, none left over from step 3
  auto want = parts_for(2);
  std::sort(want.begin(), want.end(), [](auto& a, auto& b) { return a.name < b.name; });
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(loaded->parts[i].name, want[i].name);
    EXPECT_EQ(loaded->parts[i].bytes, want[i].bytes);
  }
  EXPECT_EQ(load_latest_committed(*store_, "elsewhere").err().code, errc::not_found);
}

TEST_F(checkpoint_test, content_hash_depends_on_content_only) {
  auto a = write_checkpoint(*store_, "a", 1, parts_for(5));
  auto b = write_checkpoint(*store_, "b", 9, parts_for(5), {{"other", "meta"}});
  auto c = write_checkpoint(*store_, "c", 1, parts_for(6));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->content_hash, b->content_hash);
  EXPECT_NE(a->content_hash, c->content_hash);
}

TEST_F(checkpoint_test, latest_is_the_highest_step_numerically) {
  for (uint64_t s : {9u, 10u, 2u}) write(s);
  EXPECT_EQ(latest_step(), 10u);
  EXPECT_EQ(committed_steps(*store_, prefix_).value(), (std::vector<uint64_t>{2, 9, 10}));
}

TEST_F(checkpoint_test, no_checkpoint_is_not_found) {
  auto m = latest_committed(*store_, prefix_);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.err().code, errc::not_found);
}

TEST_F(checkpoint_test, parts_without_manifest_or_marker_are_ignored) {
  write(1);
  // A writer that died after its parts: no manifest, no marker.
  for (const auto& p : parts_for(2))
    ASSERT_TRUE(store_->put(key(2, "parts/" + p.name), p.bytes).ok());
  EXPECT_EQ(latest_step(), 1u);
  // ... and one that died after the manifest, before the marker.
  write(3);
  ASSERT_TRUE(store_->remove(key(3, "COMMITTED")).ok());
  EXPECT_EQ(latest_step(), 1u);
  EXPECT_EQ(verify_checkpoint(*store_, prefix_, 3).err().code, errc::not_found);
}

TEST_F(checkpoint_test, a_missing_part_makes_a_committed_checkpoint_torn) {
  write(1);
  write(2);
  ASSERT_TRUE(store_->remove(key(2, "parts/experts/0.bin")).ok());
  EXPECT_EQ(latest_step(), 1u);
  auto v = verify_checkpoint(*store_, prefix_, 2);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.err().code, errc::malformed_message);
  EXPECT_NE(v.err().message.find("part 'experts/0.bin' is missing"), std::string::npos)
      << v.err().message;
}

TEST_F(checkpoint_test, a_corrupted_part_of_the_same_size_is_detected) {
  write(1);
  write(2);
  std::string bytes = store_->get(key(2, "parts/dense.bin")).value();
  bytes[0] ^= 1;
  ASSERT_TRUE(store_->put(key(2, "parts/dense.bin"), bytes).ok());
  EXPECT_EQ(latest_step(), 1u);
  EXPECT_NE(verify_checkpoint(*store_, prefix_, 2).err().message.find("does not match its sha256"),
            std::string::npos);
}

TEST_F(checkpoint_test, a_truncated_part_is_detected_by_size) {
  write(4);
  ASSERT_TRUE(store_->put(key(4, "parts/optimizer/state"), "short").ok());
  auto v = verify_checkpoint(*store_, prefix_, 4);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.err().message.find("manifest says"), std::string::npos) << v.err().message;
  EXPECT_EQ(latest_committed(*store_, prefix_).err().code, errc::not_found);
}

TEST_F(checkpoint_test, a_broken_or_missing_manifest_is_torn) {
  write(1);
  write(2);
  ASSERT_TRUE(
      store_->put(key(2, "manifest.json"), "{\"format\": \"moerl-checkpoint\", \"vers").ok());
  EXPECT_EQ(latest_step(), 1u);
  EXPECT_NE(verify_checkpoint(*store_, prefix_, 2).err().message.find("not a JSON object"),
            std::string::npos);
  write(3);
  ASSERT_TRUE(store_->remove(key(3, "manifest.json")).ok());
  EXPECT_EQ(latest_step(), 1u);
  write(5);
  ASSERT_TRUE(
      store_->put(key(5, "manifest.json"), R"({"format":"moerl-checkpoint","version":2})").ok());
  EXPECT_NE(verify_checkpoint(*store_, prefix_, 5).err().message.find("version 2"),
            std::string::npos);
  EXPECT_EQ(latest_step(), 1u);
}

TEST_F(checkpoint_test, a_manifest_edited_to_match_changed_parts_still_fails_the_marker) {
  write(1);
  write(2);
  // Replace a part and rewrite the manifest consistently, as a second writer racing on the
  // same step might: the old marker does not vouch for the new content.
  ASSERT_TRUE(store_->put(key(2, "parts/dense.bin"), "different").ok());
  auto text = store_->get(key(2, "manifest.json")).value();
  auto j = nlohmann::json::parse(text);
  for (auto& p : j["parts"])
    if (p["name"] == "dense.bin") p["size"] = 9, p["sha256"] = sha256_hex("different");
  std::string listing;
  for (auto& p : j["parts"])
    listing += p["name"].get<std::string>() + "\n" + std::to_string(p["size"].get<uint64_t>()) +
               "\n" + p["sha256"].get<std::string>() + "\n";
  j["content_hash"] = sha256_hex(listing);
  ASSERT_TRUE(store_->put(key(2, "manifest.json"), j.dump()).ok());
  auto v = verify_checkpoint(*store_, prefix_, 2);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.err().message.find("COMMITTED marker"), std::string::npos) << v.err().message;
  EXPECT_EQ(latest_step(), 1u);
}

TEST_F(checkpoint_test, a_manifest_in_the_wrong_step_directory_is_torn) {
  write(1);
  write(2);
  ASSERT_TRUE(
      store_->put(key(2, "manifest.json"), store_->get(key(1, "manifest.json")).value()).ok());
  ASSERT_TRUE(store_->put(key(2, "COMMITTED"), store_->get(key(1, "COMMITTED")).value()).ok());
  EXPECT_NE(verify_checkpoint(*store_, prefix_, 2).err().message.find("names step 1"),
            std::string::npos);
  EXPECT_EQ(latest_step(), 1u);
}

TEST_F(checkpoint_test, rewriting_a_step_replaces_it_whole) {
  write(3);
  auto m = write_checkpoint(*store_, prefix_, 3, {{"only", "new content"}});
  ASSERT_TRUE(m.ok()) << m.err().to_string();
  auto latest = latest_committed(*store_, prefix_);
  ASSERT_TRUE(latest.ok()) << latest.err().to_string();
  EXPECT_EQ(latest->content_hash, m->content_hash);
  ASSERT_EQ(latest->parts.size(), 1u);
  EXPECT_EQ(latest->parts[0].name, "only");
}

TEST_F(checkpoint_test, bad_part_lists_are_refused_before_anything_is_written) {
  EXPECT_EQ(write_checkpoint(*store_, prefix_, 1, {}).err().code, errc::invalid_argument);
  EXPECT_EQ(write_checkpoint(*store_, prefix_, 1, {{"../x", "a"}}).err().code,
            errc::invalid_argument);
  auto dup = write_checkpoint(*store_, prefix_, 1, {{"a", "1"}, {"a", "2"}});
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.err().message.find("given twice"), std::string::npos);
  EXPECT_TRUE(store_->list("").value().empty());
}

TEST_F(checkpoint_test, remove_checkpoint_uncommits_first_and_leaves_other_steps) {
  write(1);
  write(2);
  ASSERT_TRUE(remove_checkpoint(*store_, prefix_, 2).ok());
  EXPECT_TRUE(store_->list(checkpoint_dir(prefix_, 2) + "/").value().empty());
  EXPECT_EQ(latest_step(), 1u);
  EXPECT_TRUE(remove_checkpoint(*store_, prefix_, 42).ok());
}

// ---- sharded checkpoints: one writer per shard, rank 0 commits ----

TEST_F(checkpoint_test, a_sharded_checkpoint_commits_only_when_every_shard_is_durable) {
  ASSERT_TRUE(write_checkpoint(*store_, prefix_, 1, parts_for(1)).ok());  // an older one
  ASSERT_TRUE(write_checkpoint_shard(*store_, prefix_, 5, 1, 3, {{"params", "one"}}).ok());
  auto early = commit_sharded_checkpoint(*store_, prefix_, 5, 3, {{"policy_version", 5}});
  ASSERT_FALSE(early.ok());
  EXPECT_EQ(early.err().code, errc::not_found);
  EXPECT_NE(early.err().message.find("shard-0000 of 3 is not durable yet"), std::string::npos)
      << early.err().message;
  EXPECT_EQ(latest_step(), 1u);  // nothing of step 5 counts yet

  ASSERT_TRUE(write_checkpoint_shard(*store_, prefix_, 5, 0, 3, {{"params", "zero"}}).ok());
  ASSERT_TRUE(write_checkpoint_shard(*store_, prefix_, 5, 2, 3,
                                     {{"params", "two"}, {"adam", std::string(100, 'm')}})
                  .ok());
  auto m = commit_sharded_checkpoint(*store_, prefix_, 5, 3, {{"policy_version", 5}});
  ASSERT_TRUE(m.ok()) << m.err().to_string();
  EXPECT_EQ(m->meta["num_shards"], 3);
  EXPECT_EQ(m->meta["policy_version"], 5);
  ASSERT_EQ(m->parts.size(), 4u);
  EXPECT_EQ(latest_step(), 5u);  // and it verifies like any checkpoint

  auto two = read_checkpoint_shard(*store_, prefix_, *m, 2);
  ASSERT_TRUE(two.ok()) << two.err().to_string();
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[0].name, "adam");
  EXPECT_EQ((*two)[1].name, "params");
  EXPECT_EQ((*two)[1].bytes, "two");
  auto none = read_checkpoint_shard(*store_, prefix_, *m, 3);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.err().code, errc::not_found);
}

// A shard written again after a try the store timed out (`again`): the step committed
// meanwhile stays committed (a plain rewrite uncommits it first).
TEST_F(checkpoint_test, a_shard_written_again_leaves_the_commit_a_rewrite_removes) {
  for (uint32_t k = 0; k < 2; ++k)
    ASSERT_TRUE(write_checkpoint_shard(*store_, prefix_, 6, k, 2,
                                       {{"params", "shard " + std::to_string(k)}})
                    .ok());
  ASSERT_TRUE(commit_sharded_checkpoint(*store_, prefix_, 6, 2, nlohmann::json::object()).ok());
  ASSERT_TRUE(
      write_checkpoint_shard(*store_, prefix_, 6, 1, 2, {{"params", "shard 1"}}, true).ok());
  EXPECT_TRUE(verify_checkpoint(*store_, prefix_, 6).ok());
  EXPECT_EQ(latest_step(), 6u);
  ASSERT_TRUE(write_checkpoint_shard(*store_, prefix_, 6, 1, 2, {{"params", "shard 1"}}).ok());
  EXPECT_FALSE(verify_checkpoint_manifest(*store_, prefix_, 6).ok());  // uncommitted
}

TEST_F(checkpoint_test, a_corrupted_shard_part_fails_the_shard_read_and_the_checkpoint) {
  for (uint32_t k = 0; k < 2; ++k)
    ASSERT_TRUE(write_checkpoint_shard(*store_, prefix_, 3, k, 2,
                                       {{"params", "shard " + std::to_string(k)}})
                    .ok());
  auto m = commit_sharded_checkpoint(*store_, prefix_, 3, 2, nlohmann::json::object());
  ASSERT_TRUE(m.ok()) << m.err().to_string();
  ASSERT_TRUE(store_->put(key(3, "parts/shard-0001/params"), "shard X").ok());
  auto mine = read_checkpoint_shard(*store_, prefix_, *m, 1);
  ASSERT_FALSE(mine.ok());
  EXPECT_NE(mine.err().message.find("shard-0001/params"), std::string::npos) << mine.err().message;
  EXPECT_TRUE(read_checkpoint_shard(*store_, prefix_, *m, 0).ok());  // the other shard is whole
  // The manifest alone still checks out; the full verification does not.
  EXPECT_TRUE(verify_checkpoint_manifest(*store_, prefix_, 3).ok());
  EXPECT_FALSE(verify_checkpoint(*store_, prefix_, 3).ok());
}

TEST_F(checkpoint_test, a_shard_marker_of_another_shape_is_refused_by_name) {
  ASSERT_TRUE(write_checkpoint_shard(*store_, prefix_, 4, 0, 2, {{"params", "a"}}).ok());
  ASSERT_TRUE(write_checkpoint_shard(*store_, prefix_, 4, 1, 4, {{"params", "b"}}).ok());
  auto m = commit_sharded_checkpoint(*store_, prefix_, 4, 2, nlohmann::json::object());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.err().code, errc::malformed_message);
  EXPECT_NE(m.err().message.find("shards/shard-0001.json names step 4, shard 1 of 4"),
            std::string::npos)
      << m.err().message;
  ASSERT_TRUE(store_->put(key(4, "shards/shard-0001.json"), "{not json").ok());
  auto garbage = commit_sharded_checkpoint(*store_, prefix_, 4, 2, nlohmann::json::object());
  ASSERT_FALSE(garbage.ok());
  EXPECT_NE(garbage.err().message.find("is not a shard marker"), std::string::npos);
  auto outside = write_checkpoint_shard(*store_, prefix_, 4, 2, 2, {{"params", "c"}});
  ASSERT_FALSE(outside.ok());
  EXPECT_EQ(outside.err().code, errc::invalid_argument);
}

TEST_F(checkpoint_test, rewriting_a_shard_uncommits_the_step) {
  ASSERT_TRUE(write_checkpoint_shard(*store_, prefix_, 6, 0, 1, {{"params", "old"}}).ok());
  ASSERT_TRUE(commit_sharded_checkpoint(*store_, prefix_, 6, 1, nlohmann::json::object()).ok());
  ASSERT_TRUE(write_checkpoint_shard(*store_, prefix_, 6, 0, 1, {{"params", "new"}}).ok());
  EXPECT_FALSE(latest_committed(*store_, prefix_).ok());  // until it is committed again
}

}  // namespace
}  // namespace moerl::store
