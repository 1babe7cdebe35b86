// The local-directory backend and open_store's URL handling, on a real file system.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "store/local_store.h"
#include "store/object_store.h"
#include "tests/support/temp_dir.h"

namespace moerl::store {
namespace {

namespace fs = std::filesystem;
using ::moerl::testing::temp_dir;

class local_store_test : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = local_store::open(dir_.path() + "/root", true);
    ASSERT_TRUE(s.ok()) << s.err().to_string();
    store_ = std::move(s.value());
  }
  // Files in the root whose names mark them as temporaries of a put.
  int count_temporaries() const {
    int n = 0;
    for (auto& e : fs::recursive_directory_iterator(store_->root()))
      if (e.path().filename().string().rfind(".moerl-", 0) == 0) ++n;
    return n;
  }
  temp_dir dir_;
  std::unique_ptr<local_store> store_;
};

TEST_F(local_store_test, put_then_get_returns_the_same_bytes_including_binary_and_empty) {
  std::string binary("a\0b\xff\n", 5);
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 % 251);
  ASSERT_TRUE(store_->put("bin", binary).ok());
  ASSERT_TRUE(store_->put("nested/deeper/empty", "").ok());
  ASSERT_TRUE(store_->put("big/object", big).ok());
  EXPECT_EQ(store_->get("bin").value(), binary);
  EXPECT_EQ(store_->get("nested/deeper/empty").value(), "");
  EXPECT_EQ(store_->get("big/object").value(), big);
  EXPECT_EQ(count_temporaries(), 0);
}

TEST_F(local_store_test, put_replaces_an_existing_object) {
  ASSERT_TRUE(store_->put("k", "first version, longer").ok());
  ASSERT_TRUE(store_->put("k", "second").ok());
  EXPECT_EQ(store_->get("k").value(), "second");
}

// put_unsynced skips the fsyncs (a policy version's store copy, checked by its hash), not the
// atomic replace: readers see the old object or the new one, never a temporary.
TEST_F(local_store_test, put_unsynced_replaces_atomically_and_refuses_bad_keys) {
  ASSERT_TRUE(store_->put_unsynced("weights/v1", "first version, longer").ok());
  ASSERT_TRUE(store_->put_unsynced("weights/v1", "second").ok());
  EXPECT_EQ(store_->get("weights/v1").value(), "second");
  EXPECT_EQ(store_->list("weights/").value(), std::vector<std::string>{"weights/v1"});
  EXPECT_EQ(count_temporaries(), 0);
  auto bad = store_->put_unsynced("weights/../escape", "x");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.err().code, errc::invalid_argument);
}

TEST_F(local_store_test, append_creates_then_extends_an_object_and_bad_keys_are_refused) {
  ASSERT_TRUE(store_->supports_append());
  ASSERT_TRUE(store_->append("log/seg", "first|").ok());
  ASSERT_TRUE(store_->append("log/seg", std::string("\0second", 7)).ok());
  EXPECT_EQ(store_->get("log/seg").value(), std::string("first|\0second", 13));
  EXPECT_EQ(store_->list("log/").value(), std::vector<std::string>{"log/seg"});
  ASSERT_TRUE(store_->put("log/seg", "replaced").ok());
  ASSERT_TRUE(store_->append("log/seg", "+").ok());
  EXPECT_EQ(store_->get("log/seg").value(), "replaced+");
  auto bad = store_->append("../escape", "x");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.err().code, errc::invalid_argument);
  EXPECT_EQ(count_temporaries(), 0);
}

TEST_F(local_store_test, get_of_a_missing_key_is_not_found_and_names_it) {
  auto r = store_->get("no/such/key");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::not_found);
  EXPECT_NE(r.err().message.find("no/such/key"), std::string::npos) << r.err().message;
  ASSERT_TRUE(store_->put("dir/child", "x").ok());
  EXPECT_EQ(store_->get("dir").err().code, errc::not_found);  // a prefix, not an object
  EXPECT_EQ(store_->get("dir/child/grandchild").err().code, errc::not_found);
}

TEST_F(local_store_test, list_is_sorted_and_filtered_by_prefix) {
  for (const char* k : {"ckpt/step-2/b", "ckpt/step-10/a", "ckpt/step-1/z", "ckpt/step-1/a",
                        "ckptx/other", "data/x", "top"})
    ASSERT_TRUE(store_->put(k, k).ok());
  EXPECT_EQ(store_->list("ckpt/step-1").value(),
            (std::vector<std::string>{"ckpt/step-1/a", "ckpt/step-1/z", "ckpt/step-10/a"}));
  EXPECT_EQ(store_->list("ckpt/").value(),
            (std::vector<std::string>{"ckpt/step-1/a", "ckpt/step-1/z", "ckpt/step-10/a",
                                      "ckpt/step-2/b"}));
  EXPECT_EQ(store_->list("ckpt").value().size(), 5u);  // includes ckptx/other
  EXPECT_EQ(store_->list("").value().size(), 7u);
  EXPECT_TRUE(store_->list("nothing/here/").value().empty());
  EXPECT_EQ(store_->list("t").value(), (std::vector<std::string>{"top"}));
}

TEST_F(local_store_test, list_skips_leftovers_of_an_interrupted_put) {
  ASSERT_TRUE(store_->put("a/real", "1").ok());
  // What a crash between write and rename leaves behind.
  std::ofstream(store_->root() + "/a/.moerl-tmp-123-0-42") << "partial";
  EXPECT_EQ(store_->list("a/").value(), (std::vector<std::string>{"a/real"}));
  EXPECT_EQ(store_->list("").value(), (std::vector<std::string>{"a/real"}));
}

TEST_F(local_store_test, remove_deletes_and_removing_a_missing_key_is_fine) {
  ASSERT_TRUE(store_->put("r/1", "x").ok());
  ASSERT_TRUE(store_->remove("r/1").ok());
  EXPECT_EQ(store_->get("r/1").err().code, errc::not_found);
  EXPECT_TRUE(store_->remove("r/1").ok());
  EXPECT_TRUE(store_->remove("never/was").ok());
  EXPECT_TRUE(store_->list("r/").value().empty());
}

TEST_F(local_store_test, removing_the_last_object_of_a_prefix_leaves_no_directory_behind) {
  ASSERT_TRUE(store_->put("ckpt/step-1/parts/shard-0/params", "p").ok());
  ASSERT_TRUE(store_->put("ckpt/step-1/COMMITTED", "").ok());
  ASSERT_TRUE(store_->put("ckpt/step-2/COMMITTED", "").ok());
  ASSERT_TRUE(store_->remove("ckpt/step-1/parts/shard-0/params").ok());
  // parts/ went with its last object; step-1/ still holds COMMITTED.
  EXPECT_FALSE(fs::exists(store_->root() + "/ckpt/step-1/parts"));
  EXPECT_TRUE(fs::exists(store_->root() + "/ckpt/step-1/COMMITTED"));
  ASSERT_TRUE(store_->remove_unsynced({"ckpt/step-1/COMMITTED"}).ok());
  EXPECT_FALSE(fs::exists(store_->root() + "/ckpt/step-1"));
  EXPECT_TRUE(fs::exists(store_->root() + "/ckpt/step-2/COMMITTED"));  // a sibling stays
  ASSERT_TRUE(store_->remove("ckpt/step-2/COMMITTED").ok());
  EXPECT_FALSE(fs::exists(store_->root() + "/ckpt"));
  EXPECT_TRUE(fs::is_directory(store_->root()));  // never the root itself
  // Writes and appends make the directories again.
  ASSERT_TRUE(store_->put("ckpt/step-3/COMMITTED", "c").ok());
  ASSERT_TRUE(store_->append("ckpt/journal/seg", "a").ok());
  EXPECT_EQ(store_->list("ckpt/").value(),
            (std::vector<std::string>{"ckpt/journal/seg", "ckpt/step-3/COMMITTED"}));
}

// remove() takes directories away while another thread lists and writes beside them (a
// trainer member restoring while member 0 drops an old checkpoint): no call fails. Until the
// reader's first put of q, the churn's removals take c/ itself away, so a put's mkdir -p can
// find a parent gone (1 failed put in ~60 runs under load before open_in_key_dir made the
// directories again on that too).
TEST_F(local_store_test, list_and_put_go_on_while_removals_take_directories_away) {
  // Without fsync, so that the churn is fast enough to reach the windows between a listing's
  // readdir and its opening of a subdirectory, and between a put's mkdir and its open.
  auto fast = local_store::open(dir_.path() + "/fast", false);
  ASSERT_TRUE(fast.ok()) << fast.err().to_string();
  local_store& store = **fast;
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0}, lists{0};
  // Every failed call counts; the first one's error is the test's message.
  auto check = [&](const status& st, const char* what) {
    if (!st.ok() && ++failures == 1) ADD_FAILURE() << what << ": " << st.err().to_string();
  };
  std::thread churn([&] {
    for (int i = 0; i < 4000; ++i) {
      const std::string key = "c/step-" + std::to_string(i % 7) + "/parts/p";
      check(store.put(key, "x"), "put of p");
      check(store.remove(key), "remove of p");
    }
    stop = true;
  });
  std::thread reader([&] {
    while (!stop) {
      auto keys = store.list("c/");
      ++lists;
      check(keys.ok() ? ok_status() : status(keys.err()), "list");
      check(store.put("c/step-3/parts/q", "y"), "put of q");
    }
  });
  churn.join();
  reader.join();
  EXPECT_GT(lists.load(), 0);
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(local_store_test,
       unsynced_removal_removes_every_key_and_reports_a_bad_one_after_trying_all) {
  for (const std::string k : {"j/1", "j/2", "j/3"}) ASSERT_TRUE(store_->put(k, "x").ok());
  EXPECT_TRUE(store_->remove_unsynced({"j/1", "j/2", "never/was"}).ok());
  EXPECT_EQ(store_->list("j/").value(), (std::vector<std::string>{"j/3"}));
  auto bad = store_->remove_unsynced({"../escape", "j/3"});
  EXPECT_EQ(bad.err().code, errc::invalid_argument) << bad.err().to_string();
  EXPECT_TRUE(store_->list("j/").value().empty());  // the key after the bad one went too
}

TEST_F(local_store_test, bad_keys_are_refused_by_every_operation_and_nothing_escapes_the_root) {
  for (const std::string key : {"../escape", "/abs", "a//b", "", "a/../../escape"}) {
    auto p = store_->put(key, "x");
    ASSERT_FALSE(p.ok()) << key;
    EXPECT_EQ(p.err().code, errc::invalid_argument) << p.err().to_string();
    EXPECT_EQ(store_->get(key).err().code, errc::invalid_argument);
    EXPECT_EQ(store_->remove(key).err().code, errc::invalid_argument);
  }
  EXPECT_EQ(store_->list("../").err().code, errc::invalid_argument);
  EXPECT_FALSE(fs::exists(dir_.path() + "/escape"));
}

TEST_F(local_store_test, an_object_cannot_also_be_a_directory_and_the_error_says_why) {
  ASSERT_TRUE(store_->put("a", "file").ok());
  auto st = store_->put("a/b", "x");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.err().code, errc::io_error);
  EXPECT_NE(st.err().message.find("leading part of the key is an existing object"),
            std::string::npos)
      << st.err().message;
  EXPECT_EQ(store_->get("a").value(), "file");
}

TEST_F(local_store_test, readers_never_see_a_partial_object_while_writers_replace_it) {
  const std::string v1(1 << 20, 'a'), v2(1 << 19, 'b');
  ASSERT_TRUE(store_->put("hot", v1).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> bad_reads{0}, reads{0};
  std::thread writer([&] {
    for (int i = 0; i < 40; ++i) ASSERT_TRUE(store_->put("hot", i % 2 ? v1 : v2).ok());
    stop = true;
  });
  std::thread reader([&] {
    while (!stop) {
      auto r = store_->get("hot");
      ++reads;
      if (!r.ok() || (r.value() != v1 && r.value() != v2)) ++bad_reads;
    }
  });
  writer.join();
  reader.join();
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(bad_reads.load(), 0);
  EXPECT_EQ(count_temporaries(), 0);
}

TEST(store_open, plain_path_and_file_url_open_the_local_backend) {
  temp_dir dir;
  const auto cfg = config::defaults();
  auto a = open_store(dir.path() + "/plain", cfg);
  ASSERT_TRUE(a.ok()) << a.err().to_string();
  ASSERT_TRUE((*a)->put("k", "v").ok());
  auto b = open_store("file://" + dir.path() + "/plain", cfg);
  ASSERT_TRUE(b.ok()) << b.err().to_string();
  EXPECT_EQ((*b)->get("k").value(), "v");
  EXPECT_EQ((*b)->describe(), "file://" + dir.path() + "/plain");
}

TEST(store_open, malformed_urls_are_clear_errors) {
  const auto cfg = config::defaults();
  EXPECT_EQ(open_store("", cfg).err().code, errc::invalid_config);
  auto r = open_store("gs://bucket/x", cfg);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.err().message.find("unknown scheme"), std::string::npos) << r.err().message;
  EXPECT_NE(open_store("file://relative/dir", cfg).err().message.find("absolute"),
            std::string::npos);
}

TEST(store_open, a_directory_path_that_is_a_file_is_an_error) {
  temp_dir dir;
  std::ofstream(dir.path() + "/f") << "x";
  auto r = open_store(dir.path() + "/f", config::defaults());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::io_error);
  EXPECT_NE(r.err().message.find(dir.path() + "/f"), std::string::npos) << r.err().message;
}

TEST(store_open, s3_without_credentials_or_with_a_tiny_part_size_is_refused) {
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  auto cfg = config::defaults();
  auto r = open_store("s3://my-bucket/prefix", cfg);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::invalid_config);
  EXPECT_NE(r.err().message.find("AWS_ACCESS_KEY_ID"), std::string::npos) << r.err().message;

  ::setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "secret", 1);
  // S3's 5 MiB minimum part size is the schema's range: a config never holds less.
  auto small_part = cfg.set("store.multipart_part_bytes", "1024", "test");
  ASSERT_FALSE(small_part.ok());
  EXPECT_NE(small_part.err().message.find("store.multipart_part_bytes"), std::string::npos)
      << small_part.err().message;

  EXPECT_NE(open_store("s3://Bad_Bucket", config::defaults()).err().message.find("bucket"),
            std::string::npos);
  auto traversal = open_store("s3://my-bucket/runs/../other", config::defaults());
  ASSERT_FALSE(traversal.ok());
  EXPECT_NE(traversal.err().message.find("'..'"), std::string::npos) << traversal.err().message;
  auto bad_region = config::defaults();
  ASSERT_TRUE(bad_region.set("store.s3_region", "us-east-1:evil", "test").ok());
  EXPECT_NE(open_store("s3://my-bucket", bad_region).err().message.find("store.s3_region"),
            std::string::npos);
  auto endpoint = config::defaults();
  ASSERT_TRUE(endpoint.set("store.s3_endpoint", "ftp://host", "test").ok());
  EXPECT_NE(open_store("s3://my-bucket", endpoint).err().message.find("http://"),
            std::string::npos);
  auto ok = open_store("s3://my-bucket/some/prefix/", config::defaults());
  ASSERT_TRUE(ok.ok()) << ok.err().to_string();
  EXPECT_EQ(
      (*ok)->describe(),
      "s3://my-bucket/some/prefix (endpoint https://s3.us-east-1.amazonaws.com, region us-east-1)");
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
}

}  // namespace
}  // namespace moerl::store
