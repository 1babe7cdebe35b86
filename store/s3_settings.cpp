#include "store/s3_settings.h"

#include <cstdlib>

#include "store/key_rules.h"

namespace moerl::store {

namespace {

error bad(const std::string& what) { return error(errc::invalid_config, "S3 store: " + what); }

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// S3 bucket naming rules, the subset that matters for path-style URLs: 3..63 characters of
// lower-case letters, digits, '.', '-'.
bool valid_bucket(const std::string& b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-')) return false;
  }
  return true;
}

}  // namespace

status validate(const s3_settings& s) {
  if (!valid_bucket(s.bucket))
    return bad("bucket '" + s.bucket + "' is not a valid S3 bucket name (3-63 of a-z 0-9 . -)");
  if (s.endpoint.rfind("http://", 0) != 0 && s.endpoint.rfind("https://", 0) != 0)
    return bad("store.s3_endpoint '" + s.endpoint + "' must start with http:// or https://");
  if (s.region.empty()) return bad("store.s3_region is empty");
  for (char c : s.region) {
    // The region becomes part of libcurl's "aws:amz:<region>:s3" and the signing scope.
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
      return bad("store.s3_region '" + s.region + "' is not a region name (a-z 0-9 -)");
  }
  if (!s.prefix.empty()) {
    if (auto st = validate_key(s.prefix); !st)
      return bad("key prefix '" + s.prefix + "' in the URL: " + st.err().message);
  }
  if (s.access_key_id.empty() || s.secret_access_key.empty())
    return bad("no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY");
  if (s.multipart_part_bytes < s3_min_part_bytes)
    return bad("store.multipart_part_bytes = " + std::to_string(s.multipart_part_bytes) +
               " is below S3's minimum part size of 5 MiB (5242880)");
  if (s.multipart_threshold_bytes < 1)
    return bad("store.multipart_threshold_bytes must be positive");
  if (s.upload_concurrency < 1 || s.upload_concurrency > 64)
    return bad("store.s3_upload_concurrency = " + std::to_string(s.upload_concurrency) +
               " is outside 1..64");
  if (s.request_timeout_ms < 1) return bad("store.s3_timeout_ms must be positive");
  if (s.max_retries < 0) return bad("store.s3_max_retries must not be negative");
  return ok_status();
}

result<s3_settings> s3_settings_from_url(const std::string& url, const config& cfg) {
  const std::string scheme = "s3://";
  if (url.rfind(scheme, 0) != 0) return bad("URL '" + url + "' does not start with s3://");
  std::string rest = url.substr(scheme.size());
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  s3_settings s;
  const size_t slash = rest.find('/');
  s.bucket = rest.substr(0, slash);
  if (slash != std::string::npos) s.prefix = rest.substr(slash + 1);
  s.region = cfg.get_string("store.s3_region");
  s.endpoint = cfg.get_string("store.s3_endpoint");
  if (s.endpoint.empty()) s.endpoint = "https://s3." + s.region + ".amazonaws.com";
  while (!s.endpoint.empty() && s.endpoint.back() == '/') s.endpoint.pop_back();
  s.access_key_id = env_or_empty("AWS_ACCESS_KEY_ID");
  s.secret_access_key = env_or_empty("AWS_SECRET_ACCESS_KEY");
  s.session_token = env_or_empty("AWS_SESSION_TOKEN");
  s.multipart_threshold_bytes = cfg.get_int("store.multipart_threshold_bytes");
  s.multipart_part_bytes = cfg.get_int("store.multipart_part_bytes");
  s.upload_concurrency = cfg.get_int("store.s3_upload_concurrency");
  s.request_timeout_ms = cfg.get_int("store.s3_timeout_ms");
  s.max_retries = cfg.get_int("store.s3_max_retries");
  if (auto st = validate(s); !st) return st.err();
  return s;
}

}  // namespace moerl::store
