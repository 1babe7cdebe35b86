// Everything the S3 backend needs to reach a bucket: where, as whom, and how to move
// large objects. Built from an s3:// URL, the store.* config keys and the standard AWS
// environment variables; tests build one directly to point at their own server.
#pragma once

#include <cstdint>
#include <string>

#include "common/config.h"
#include "common/error.h"

namespace moerl::store {

struct s3_settings {
  std::string endpoint;  // scheme://host[:port] without a trailing '/'; path-style
  std::string region;    // signing region, e.g. "us-east-1"
  std::string bucket;
  std::string prefix;  // key prefix inside the bucket, no leading/trailing '/'; may be empty
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;                       // empty unless temporary credentials are used
  int64_t multipart_threshold_bytes = 64ll << 20;  // objects larger than this go multipart
  int64_t multipart_part_bytes = 16ll << 20;       // part size (S3: >= 5 MiB, <= 10000 parts)
  int64_t upload_concurrency = 4;                  // parts of one object in flight at once
  int64_t request_timeout_ms = 120000;             // limit on one HTTP request
  int64_t max_retries = 3;                         // retries after network errors and HTTP 5xx
  int64_t list_max_keys = 0;  // ListObjectsV2 page size; 0: the server's default (1000)
};

inline constexpr int64_t s3_min_part_bytes = 5ll << 20;  // S3 rejects smaller non-last parts
inline constexpr int64_t s3_max_parts = 10000;

// Checks ranges and required fields; errc::invalid_config naming the field.
status validate(const s3_settings& s);

// Parses "s3://bucket[/prefix]" and fills the rest from `cfg` (store.s3_endpoint,
// store.s3_region, store.multipart_*, store.s3_*) and AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN. Missing credentials are an error.
result<s3_settings> s3_settings_from_url(const std::string& url, const config& cfg);

}  // namespace moerl::store
