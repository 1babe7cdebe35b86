// The SigV4 oracle against AWS's published vectors: the sig-v4-test-suite cases
// get-vanilla, get-vanilla-query-order-key-case and post-vanilla (example credentials
// AKIDEXAMPLE, service "service", 20150830T123600Z), and the S3 developer guide's
// GET Object example (AKIAIOSFODNN7EXAMPLE, 20130524T000000Z, with a Range header).
// If the oracle matches these, it can judge what libcurl sends (s3_moto_test).
#include <gtest/gtest.h>

#include "sigv4_oracle.h"
#include "store/digest.h"

namespace moerl::store::testing {
namespace {

sigv4_input suite_request(const std::string& method, const std::string& query) {
  sigv4_input in;
  in.method = method;
  in.canonical_uri = "/";
  in.canonical_query = query;
  in.headers = {{"host", "example.amazonaws.com"}, {"x-amz-date", "20150830T123600Z"}};
  in.payload_hash = empty_sha256_hex;
  in.amz_date = "20150830T123600Z";
  in.region = "us-east-1";
  in.service = "service";
  in.access_key_id = "AKIDEXAMPLE";
  in.secret_access_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
  return in;
}

TEST(sigv4_vectors, get_vanilla_matches_canonical_request_string_to_sign_and_signature) {
  const auto out = sigv4_sign(suite_request("GET", ""));
  EXPECT_EQ(out.canonical_request,
            "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
            "host;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(out.string_to_sign,
            "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
            "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63");
  EXPECT_EQ(out.signature, "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
  EXPECT_EQ(out.authorization,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
            "SignedHeaders=host;x-amz-date, "
            "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
}

TEST(sigv4_vectors, post_vanilla_matches_string_to_sign_and_signature) {
  const auto out = sigv4_sign(suite_request("POST", ""));
  EXPECT_EQ(out.string_to_sign,
            "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
            "553f88c9e4d10fc9e109e2aeb65f030801b70c2f6468faca261d401ae622fc87");
  EXPECT_EQ(out.signature, "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b");
}

TEST(sigv4_vectors, get_vanilla_query_order_key_case_signs_the_sorted_query) {
  // The request says ?Param2=value2&Param1=value1; the canonical form sorts by name.
  const auto out = sigv4_sign(suite_request("GET", "Param1=value1&Param2=value2"));
  EXPECT_EQ(out.signature, "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
}

TEST(sigv4_vectors, s3_get_object_example_with_range_header) {
  sigv4_input in;
  in.method = "GET";
  in.canonical_uri = "/test.txt";
  in.headers = {{"host", "examplebucket.s3.amazonaws.com"},
                {"range", "bytes=0-9"},
                {"x-amz-content-sha256", empty_sha256_hex},
                {"x-amz-date", "20130524T000000Z"}};
  in.payload_hash = empty_sha256_hex;
  in.amz_date = "20130524T000000Z";
  in.region = "us-east-1";
  in.service = "s3";
  in.access_key_id = "AKIAIOSFODNN7EXAMPLE";
  in.secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
  const auto out = sigv4_sign(in);
  EXPECT_EQ(sha256_hex(out.canonical_request),
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  EXPECT_EQ(out.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(sigv4_vectors, a_different_secret_gives_a_different_signature) {
  auto in = suite_request("GET", "");
  in.secret_access_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEZ";
  EXPECT_NE(sigv4_sign(in).signature,
            "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
}

TEST(sigv4_vectors, sha256_of_known_strings) {
  EXPECT_EQ(sha256_hex(""), empty_sha256_hex);
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace moerl::store::testing
