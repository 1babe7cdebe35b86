// An independent SigV4 signer, used only as a test oracle and as executable documentation
// of the algorithm. Production requests are signed by libcurl (CURLOPT_AWS_SIGV4); this
// code checks that we understand what libcurl does, against AWS's published test-suite
// vectors and against the headers libcurl actually sends.
#pragma once

#include <map>
#include <string>

namespace moerl::store::testing {

struct sigv4_input {
  std::string method;           // "GET"
  std::string canonical_uri;    // already encoded, e.g. "/" or "/bucket/key"
  std::string canonical_query;  // sorted and encoded, "" when none
  // Signed headers: lower-case name -> value (trimmed). Sorted by the map.
  std::map<std::string, std::string> headers;
  std::string payload_hash;  // hex SHA-256 of the body (or what x-amz-content-sha256 says)
  std::string amz_date;      // "20150830T123600Z"
  std::string region;
  std::string service;
  std::string access_key_id;
  std::string secret_access_key;
};

struct sigv4_output {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signed_headers;  // "host;x-amz-date"
  std::string signature;       // hex
  std::string authorization;   // the full Authorization header value
};

sigv4_output sigv4_sign(const sigv4_input& in);

std::string hmac_sha256(const std::string& key, const std::string& data);  // raw bytes
std::string to_hex(const std::string& raw);

}  // namespace moerl::store::testing
