// One S3 HTTP exchange through libcurl, signed by libcurl's SigV4 (CURLOPT_AWS_SIGV4):
// path-style URL to the configured endpoint, x-amz-content-sha256 computed here (libcurl
// signs the header value we give it, which is what S3 verifies against the body), and
// retries with exponential backoff after network errors and HTTP 5xx.
// Private to store/. Safe to call from any thread: each exchange uses its own handle.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "store/s3_settings.h"

namespace moerl::store {

struct s3_request {
  const char* method = "GET";  // GET, PUT, POST or DELETE
  std::string path;            // "/bucket/key", already percent-encoded (s3_encode)
  // Canonical query: parameters sorted by name, names and values percent-encoded,
  // "a=1&b=2". SigV4 signs the query as sent; sending it canonical keeps both equal.
  std::string query;
  std::string_view body;     // the payload; must outlive the call
  std::string content_type;  // for requests with a body; empty: application/octet-stream
};

struct s3_response {
  long status = 0;  // HTTP status
  std::string body;
  std::string etag;  // the ETag response header, quotes included (UploadPart needs it)
};

// Percent-encodes per SigV4/S3: unreserved characters (A-Z a-z 0-9 - _ . ~) stay, every
// other byte becomes %XX; '/' stays only when `keep_slash` (object paths, not query values).
std::string s3_encode(std::string_view text, bool keep_slash);

class s3_client {
 public:
  explicit s3_client(s3_settings settings);

  // Any HTTP status comes back as a response (the caller knows what it expects); an error
  // only when no response arrived after all retries (network, timeout, TLS).
  result<s3_response> send(const s3_request& req) const;

  const s3_settings& settings() const { return settings_; }

 private:
  result<s3_response> send_once(const s3_request& req) const;
  s3_settings settings_;
};

}  // namespace moerl::store
