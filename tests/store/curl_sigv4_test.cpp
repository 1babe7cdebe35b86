// libcurl's SigV4 signature, as it goes on the wire, equals the one the oracle computes
// (the oracle itself is pinned to AWS's published vectors in sigv4_vectors_test). A
// loopback HTTP server records exactly what the S3 backend sends; for every request the
// test rebuilds the canonical request from the received method, target and signed
// headers and recomputes the Authorization header. It also checks that the payload hash
// we set is the body's and that it is among the signed headers, so the body is covered.
#include <gtest/gtest.h>

#include <httplib.h>

#include <mutex>
#include <thread>

#include "sigv4_oracle.h"
#include "store/digest.h"
#include "store/s3_store.h"

namespace moerl::store {
namespace {

struct recorded {
  std::string method, target, body;
  std::multimap<std::string, std::string> headers;  // names as received
};

class recording_server {
 public:
  recording_server() {
    auto record = [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      recorded r{req.method, req.target, req.body, {}};
      for (const auto& [k, v] : req.headers) r.headers.emplace(k, v);
      requests_.push_back(std::move(r));
      if (req.method == "GET" && req.target.find("list-type=2") != std::string::npos) {
        res.set_content("<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>",
                        "application/xml");
      } else if (req.method == "GET") {
        res.set_content("stored bytes", "application/octet-stream");
      }
      res.status = req.method == "DELETE" ? 204 : 200;
    };
    server_.Get(".*", record);
    server_.Put(".*", record);
    server_.Post(".*", record);
    server_.Delete(".*", record);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::yield();
  }
  ~recording_server() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  std::vector<recorded> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<recorded> requests_;
};

std::string header(const recorded& r, const std::string& lower_name) {
  for (const auto& [k, v] : r.headers) {
    std::string lk = k;
    for (auto& c : lk) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lk == lower_name) return v;
  }
  return {};
}

std::string between(const std::string& s, const std::string& from, const std::string& to) {
  const size_t b = s.find(from);
  if (b == std::string::npos) return {};
  const size_t e = s.find(to, b + from.size());
  return s.substr(b + from.size(),
                  e == std::string::npos ? std::string::npos : e - b - from.size());
}

// The Authorization header the oracle computes for the request as received.
std::string oracle_authorization(const recorded& r, const s3_settings& s) {
  const std::string signed_headers = between(header(r, "authorization"), "SignedHeaders=", ",");
  testing::sigv4_input in;
  in.method = r.method;
  const size_t q = r.target.find('?');
  in.canonical_uri = r.target.substr(0, q);
  in.canonical_query = q == std::string::npos ? "" : r.target.substr(q + 1);
  size_t begin = 0;
  while (begin <= signed_headers.size()) {
    size_t end = signed_headers.find(';', begin);
    if (end == std::string::npos) end = signed_headers.size();
    const std::string name = signed_headers.substr(begin, end - begin);
    in.headers[name] = header(r, name);
    begin = end + 1;
  }
  in.payload_hash = header(r, "x-amz-content-sha256");
  in.amz_date = header(r, "x-amz-date");
  in.region = s.region;
  in.service = "s3";
  in.access_key_id = s.access_key_id;
  in.secret_access_key = s.secret_access_key;
  return testing::sigv4_sign(in).authorization;
}

void expect_signature_matches_oracle(const recorded& r, const s3_settings& s) {
  SCOPED_TRACE(r.method + " " + r.target);
  const std::string auth = header(r, "authorization");
  ASSERT_FALSE(auth.empty()) << "request was not signed";
  const std::string signed_headers = between(auth, "SignedHeaders=", ",");
  EXPECT_NE((signed_headers + ";").find("x-amz-content-sha256;"), std::string::npos)
      << "the payload hash is not signed: " << auth;
  EXPECT_EQ(header(r, "x-amz-content-sha256"), sha256_hex(r.body))
      << "payload hash is not the body's";
  EXPECT_EQ(oracle_authorization(r, s), auth);
}

s3_settings settings_for(int port) {
  s3_settings s;
  s.endpoint = "http://127.0.0.1:" + std::to_string(port);
  s.region = "eu-west-1";
  s.bucket = "sig-check";
  s.prefix = "run 7";
  s.access_key_id = "AKIDEXAMPLE";
  s.secret_access_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
  s.max_retries = 0;
  return s;
}

TEST(store_curl_sigv4, every_request_libcurl_signs_matches_the_oracle) {
  recording_server server;
  const auto s = settings_for(server.port());
  auto store = s3_store::open(s);
  ASSERT_TRUE(store.ok()) << store.err().to_string();
  ASSERT_TRUE((*store)->put("ckpt/a b+c=d.bin", std::string("payload\0with nul", 16)).ok());
  ASSERT_TRUE((*store)->put("empty", "").ok());
  auto got = (*store)->get("ckpt/\xc3\xa9t\xc3\xa9");
  ASSERT_TRUE(got.ok()) << got.err().to_string();
  EXPECT_EQ(got.value(), "stored bytes");
  ASSERT_TRUE((*store)->list("ckpt/step 1/").ok());
  ASSERT_TRUE((*store)->remove("ckpt/x").ok());

  const auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 5u);
  EXPECT_EQ(reqs[0].target, "/sig-check/run%207/ckpt/a%20b%2Bc%3Dd.bin");
  EXPECT_EQ(reqs[3].target, "/sig-check?list-type=2&prefix=run%207%2Fckpt%2Fstep%201%2F");
  for (const auto& r : reqs) expect_signature_matches_oracle(r, s);
}

TEST(store_curl_sigv4, a_session_token_is_sent_and_signed) {
  recording_server server;
  auto s = settings_for(server.port());
  s.session_token = "FwoGZXIvYXdzEXAMPLETOKEN";
  auto store = s3_store::open(s);
  ASSERT_TRUE(store.ok()) << store.err().to_string();
  ASSERT_TRUE((*store)->put("k", "v").ok());
  const auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(header(reqs[0], "x-amz-security-token"), s.session_token);
  EXPECT_NE(header(reqs[0], "authorization").find("x-amz-security-token"), std::string::npos);
  expect_signature_matches_oracle(reqs[0], s);
}

TEST(store_curl_sigv4, the_oracle_notices_a_tampered_request) {
  // Guards the comparison above: were the oracle blind to the target, it would prove nothing.
  recording_server server;
  const auto s = settings_for(server.port());
  auto store = s3_store::open(s);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->put("k", "v").ok());
  const auto sent = server.requests().at(0);
  ASSERT_EQ(oracle_authorization(sent, s), header(sent, "authorization"));
  auto tampered = sent;
  tampered.target += "x";
  EXPECT_NE(oracle_authorization(tampered, s), header(sent, "authorization"));
  tampered = sent;
  tampered.body += "!";
  tampered.headers.erase("x-amz-content-sha256");
  tampered.headers.emplace("x-amz-content-sha256", sha256_hex(tampered.body));
  EXPECT_NE(oracle_authorization(tampered, s), header(sent, "authorization"));
}

}  // namespace
}  // namespace moerl::store
