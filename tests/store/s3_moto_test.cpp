// The S3 backend against a real S3 API server: moto's server mode, started by this test
// on a free loopback port with IAM authentication on, so every request's SigV4 signature
// (made by libcurl) is verified by the server and a wrong secret is refused.
//
// Skips only when /usr/bin/python3 lacks moto AND MOERL_REQUIRE_S3_TESTS is unset; with it
// set (CI), a missing moto fails. A moto that is installed but does not start always fails.
#include <gtest/gtest.h>

#include <cstdlib>

#include "moto_server.h"
#include "store/checkpoint.h"
#include "store/s3_client.h"
#include "store/s3_store.h"
#include "store/s3_xml.h"

#ifndef MOERL_STORE_TEST_DIR
#error "MOERL_STORE_TEST_DIR must name tests/store (set by tests/store/CMakeLists.txt)"
#endif

namespace moerl::store {
namespace {

using testing::moto_server;

class s3_moto_test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!testing::python_has_moto()) return;
    auto s = moto_server::start(std::string(MOERL_STORE_TEST_DIR) + "/moto_s3_server.py", 120000);
    if (!s) {
      start_error_ = new std::string(s.err().to_string());
      return;
    }
    server_ = s.value().release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  void SetUp() override {
    if (server_ != nullptr) return;
    if (start_error_ != nullptr)
      FAIL() << "moto is installed but its server did not start: " << *start_error_;
    if (::moerl::store::testing::s3_tests_required())
      FAIL() << "MOERL_REQUIRE_S3_TESTS is set but /usr/bin/python3 cannot import moto; install it "
                "with: /usr/bin/python3 -m pip install --break-system-packages 'moto[server]'";
    GTEST_SKIP() << "moto is not installed for /usr/bin/python3, so there is no S3 server to test "
                    "against (install 'moto[server]', see scripts/install-deps.sh; set "
                    "MOERL_REQUIRE_S3_TESTS=1 to make this a failure)";
  }

  // Settings for the test's own prefix, so tests do not see each other's objects.
  static s3_settings settings_for(const std::string& prefix) {
    const auto& info = server_->info();
    s3_settings s;
    s.endpoint = info.endpoint;
    s.region = info.region;
    s.bucket = info.bucket;
    s.prefix = prefix;
    s.access_key_id = info.access_key_id;
    s.secret_access_key = info.secret_access_key;
    s.max_retries = 0;  // a 5xx from the test server is a failure to see, not to hide
    s.request_timeout_ms = 60000;
    return s;
  }
  static std::unique_ptr<s3_store> open(const s3_settings& s) {
    auto r = s3_store::open(s);
    EXPECT_TRUE(r.ok()) << r.err().to_string();
    return r.ok() ? std::move(r.value()) : nullptr;
  }

  static moto_server* server_;
  static std::string* start_error_;
};

moto_server* s3_moto_test::server_ = nullptr;
std::string* s3_moto_test::start_error_ = nullptr;

TEST_F(s3_moto_test, put_get_list_remove_round_trip_with_awkward_key_characters) {
  auto store = open(settings_for("roundtrip"));
  ASSERT_TRUE(store);
  const std::vector<std::string> keys = {"ckpt/step 1/a+b=c.bin", "ckpt/step-2/\xc3\xa9t\xc3\xa9",
                                         "ckpt/step-2/x~y_z", "other/thing"};
  for (const auto& k : keys) {
    auto st = store->put(k, "value of " + k);
    ASSERT_TRUE(st.ok()) << st.err().to_string();
  }
  for (const auto& k : keys) {
    auto r = store->get(k);
    ASSERT_TRUE(r.ok()) << r.err().to_string();
    EXPECT_EQ(r.value(), "value of " + k);
  }
  auto l = store->list("ckpt/");
  ASSERT_TRUE(l.ok()) << l.err().to_string();
  EXPECT_EQ(l.value(), (std::vector<std::string>{"ckpt/step 1/a+b=c.bin", "ckpt/step-2/x~y_z",
                                                 "ckpt/step-2/\xc3\xa9t\xc3\xa9"}));
  EXPECT_EQ(store->list("").value().size(), 4u);

  ASSERT_TRUE(store->remove("ckpt/step 1/a+b=c.bin").ok());
  auto gone = store->get("ckpt/step 1/a+b=c.bin");
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.err().code, errc::not_found);
  EXPECT_NE(gone.err().message.find("HTTP 404"), std::string::npos) << gone.err().message;
  EXPECT_NE(gone.err().message.find("NoSuchKey"), std::string::npos) << gone.err().message;
  EXPECT_TRUE(store->remove("ckpt/step 1/a+b=c.bin").ok());  // missing: not an error
  EXPECT_EQ(store->list("ckpt/").value().size(), 2u);
}

// S3 objects are immutable: no appends, and a caller that tries anyway is told so.
TEST_F(s3_moto_test, appends_are_refused_with_a_named_cause) {
  auto store = open(settings_for("append"));
  ASSERT_TRUE(store);
  EXPECT_FALSE(store->supports_append());
  auto st = store->append("journal/1", "x");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("no appends"), std::string::npos) << st.err().message;
}

TEST_F(s3_moto_test, binary_and_empty_objects_survive_and_put_replaces) {
  auto store = open(settings_for("binary"));
  ASSERT_TRUE(store);
  std::string bin(70000, '\0');
  for (size_t i = 0; i < bin.size(); ++i) bin[i] = static_cast<char>(i * 7 % 256);
  ASSERT_TRUE(store->put("b", bin).ok());
  ASSERT_TRUE(store->put("empty", "").ok());
  EXPECT_EQ(store->get("b").value(), bin);
  EXPECT_EQ(store->get("empty").value(), "");
  ASSERT_TRUE(store->put("b", "short").ok());
  EXPECT_EQ(store->get("b").value(), "short");
}

// Multipart uploads still open under `prefix` in the test bucket (ListMultipartUploads).
std::vector<std::string> open_uploads(const s3_settings& s, const std::string& prefix) {
  s3_client client(s);
  s3_request req;
  req.path = "/" + s.bucket;
  req.query = "prefix=" + s3_encode(prefix, false) + "&uploads=";
  auto r = client.send(req);
  EXPECT_TRUE(r.ok()) << r.err().to_string();
  if (!r.ok()) return {};
  EXPECT_EQ(r->status, 200) << r->body;
  return xml_all(r->body, "UploadId");
}

std::string pseudo_random_bytes(size_t n) {
  std::string out(n, '\0');
  uint32_t x = 12345;
  for (auto& c : out) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  return out;
}

// moto_s3_server.py sets moto's minimum part size to 6 MiB (S3's is 5 MiB).
TEST_F(s3_moto_test, an_object_above_the_threshold_goes_multipart_and_reads_back_whole) {
  const std::string big = pseudo_random_bytes((12 << 20) + 12345);
  for (int64_t concurrency : {int64_t{1}, int64_t{4}}) {
    SCOPED_TRACE("upload_concurrency " + std::to_string(concurrency));
    auto s = settings_for("multipart-" + std::to_string(concurrency));
    s.multipart_threshold_bytes = 7 << 20;
    s.multipart_part_bytes = 6 << 20;
    s.upload_concurrency = concurrency;
    auto store = open(s);
    ASSERT_TRUE(store);
    EXPECT_EQ(store->parts_for(static_cast<int64_t>(big.size())), 3);
    EXPECT_EQ(store->parts_for(7 << 20), 0);  // at the threshold: one PutObject
    auto st = store->put("weights/v1.bin", big);
    ASSERT_TRUE(st.ok()) << st.err().to_string();
    auto r = store->get("weights/v1.bin");
    ASSERT_TRUE(r.ok()) << r.err().to_string();
    EXPECT_TRUE(r.value() == big) << "multipart object differs (size " << r.value().size() << ")";
    EXPECT_EQ(store->list("weights/").value(), (std::vector<std::string>{"weights/v1.bin"}));
    EXPECT_TRUE(open_uploads(s, s.prefix + "/").empty());
  }
}

TEST_F(s3_moto_test, a_multipart_upload_that_fails_to_complete_is_aborted_and_leaves_nothing) {
  auto s = settings_for("mp-abort");
  s.multipart_threshold_bytes = 6 << 20;
  s.multipart_part_bytes = 5 << 20;  // below this server's minimum: completion fails
  auto store = open(s);
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->put("obj", "old version").ok());
  auto st = store->put("obj", pseudo_random_bytes(11 << 20));
  ASSERT_FALSE(st.ok()) << "the server accepted parts below its minimum size";
  EXPECT_NE(st.err().message.find("CompleteMultipartUpload"), std::string::npos)
      << st.err().message;
  EXPECT_NE(st.err().message.find("HTTP 400 EntityTooSmall"), std::string::npos)
      << st.err().message;
  EXPECT_TRUE(open_uploads(s, "mp-abort/").empty()) << "the failed upload was not aborted";
  EXPECT_EQ(store->get("obj").value(), "old version");  // the failed put left the object alone
}

TEST_F(s3_moto_test, listing_follows_continuation_tokens_across_pages) {
  auto s = settings_for("pages");
  s.list_max_keys = 2;
  auto store = open(s);
  ASSERT_TRUE(store);
  std::vector<std::string> expected;
  for (int i = 0; i < 7; ++i) {
    const std::string k = "p/" + std::to_string(i);
    ASSERT_TRUE(store->put(k, "x").ok());
    expected.push_back(k);
  }
  ASSERT_TRUE(store->put("q/not-listed", "x").ok());
  auto l = store->list("p/");
  ASSERT_TRUE(l.ok()) << l.err().to_string();
  EXPECT_EQ(l.value(), expected);
}

TEST_F(s3_moto_test, the_store_prefix_isolates_stores_in_one_bucket) {
  auto a = open(settings_for("iso/a"));
  auto b = open(settings_for("iso/b"));
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->put("k", "from a").ok());
  EXPECT_EQ(b->get("k").err().code, errc::not_found);
  EXPECT_TRUE(b->list("").value().empty());
  EXPECT_EQ(a->list("").value(), (std::vector<std::string>{"k"}));
  auto root = open(settings_for(""));
  ASSERT_TRUE(root);
  EXPECT_EQ(root->get("iso/a/k").value(), "from a");
}

TEST_F(s3_moto_test, a_wrong_secret_is_refused_with_status_and_s3_error_code) {
  auto s = settings_for("auth");
  s.secret_access_key = "definitely-not-the-secret";
  auto store = open(s);
  ASSERT_TRUE(store);
  auto st = store->put("k", "x");
  ASSERT_FALSE(st.ok()) << "the server accepted a request signed with a wrong secret";
  EXPECT_EQ(st.err().code, errc::unauthorized);
  EXPECT_NE(st.err().message.find("HTTP 403"), std::string::npos) << st.err().message;
  EXPECT_NE(st.err().message.find("SignatureDoesNotMatch"), std::string::npos) << st.err().message;
  auto g = store->get("k");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.err().code, errc::unauthorized);
  EXPECT_FALSE(store->list("").ok());

  // The right secret on the same key works, so the refusal was about the signature.
  auto good = open(settings_for("auth"));
  ASSERT_TRUE(good);
  EXPECT_TRUE(good->put("k", "x").ok());
}

TEST_F(s3_moto_test, an_unknown_access_key_is_refused) {
  auto s = settings_for("auth");
  s.access_key_id = "AKIANOTAREALKEY00000";
  auto store = open(s);
  ASSERT_TRUE(store);
  auto st = store->put("k", "x");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.err().code, errc::unauthorized);
  EXPECT_NE(st.err().message.find("InvalidAccessKeyId"), std::string::npos) << st.err().message;
}

TEST_F(s3_moto_test, a_multipart_upload_with_a_wrong_secret_fails_at_initiation) {
  auto s = settings_for("auth-mp");
  s.multipart_threshold_bytes = 7 << 20;
  s.multipart_part_bytes = 6 << 20;
  s.secret_access_key = "wrong";
  auto store = open(s);
  ASSERT_TRUE(store);
  auto st = store->put("big", std::string(8 << 20, 'x'));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("CreateMultipartUpload"), std::string::npos) << st.err().message;
  EXPECT_NE(st.err().message.find("SignatureDoesNotMatch"), std::string::npos) << st.err().message;
}

TEST_F(s3_moto_test, a_missing_bucket_is_a_clear_error) {
  auto s = settings_for("");
  s.bucket = "no-such-bucket-here";
  auto store = open(s);
  ASSERT_TRUE(store);
  auto r = store->get("k");
  ASSERT_FALSE(r.ok());
  // Not errc::not_found: "no such object" would let a resume start from scratch silently.
  EXPECT_EQ(r.err().code, errc::invalid_config);
  EXPECT_NE(r.err().message.find("NoSuchBucket"), std::string::npos) << r.err().message;
  EXPECT_NE(r.err().message.find("s3://no-such-bucket-here/k"), std::string::npos)
      << r.err().message;
  EXPECT_EQ(store->list("").err().code, errc::invalid_config);
  EXPECT_EQ(store->remove("k").err().code, errc::invalid_config);
  EXPECT_EQ(latest_committed(*store, "ckpt").err().code, errc::invalid_config);
}

TEST_F(s3_moto_test, checkpoints_commit_and_torn_ones_are_skipped_over_s3) {
  auto store = open(settings_for("ckpt-run"));
  ASSERT_TRUE(store);
  for (uint64_t step : {1u, 2u}) {
    auto m = write_checkpoint(*store, "ckpt", step,
                              {{"weights/experts.bin", std::string(5000, static_cast<char>(step))},
                               {"meta.txt", "step " + std::to_string(step)}});
    ASSERT_TRUE(m.ok()) << m.err().to_string();
  }
  auto latest = latest_committed(*store, "ckpt");
  ASSERT_TRUE(latest.ok()) << latest.err().to_string();
  EXPECT_EQ(latest->step, 2u);
  ASSERT_TRUE(store->remove(checkpoint_dir("ckpt", 2) + "/parts/weights/experts.bin").ok());
  latest = latest_committed(*store, "ckpt");
  ASSERT_TRUE(latest.ok()) << latest.err().to_string();
  EXPECT_EQ(latest->step, 1u);
  auto parts = read_checkpoint(*store, "ckpt", latest.value());
  ASSERT_TRUE(parts.ok()) << parts.err().to_string();
  EXPECT_EQ(parts->at(0).name, "meta.txt");
  EXPECT_EQ(parts->at(0).bytes, "step 1");
}

TEST_F(s3_moto_test, a_dead_endpoint_is_an_io_error_naming_the_object) {
  auto s = settings_for("");
  s.endpoint = "http://127.0.0.1:1";  // nothing listens on port 1
  auto store = open(s);
  ASSERT_TRUE(store);
  auto r = store->get("k");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::io_error);
  EXPECT_NE(r.err().message.find("GetObject"), std::string::npos) << r.err().message;
  EXPECT_NE(r.err().message.find("curl_easy_perform"), std::string::npos) << r.err().message;
}

}  // namespace
}  // namespace moerl::store
