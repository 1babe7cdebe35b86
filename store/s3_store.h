// The S3 backend: objects in one bucket under an optional key prefix, path-style
// addressing (endpoint/bucket/key), signed with SigV4 by libcurl.
//
// put: one PutObject up to store.multipart_threshold_bytes; above it a multipart upload
// (initiate, parts of store.multipart_part_bytes, complete) that is aborted when any step
// fails, so no half-written object ever becomes visible and no orphan parts stay billed.
// list: ListObjectsV2, following continuation tokens. Errors carry the operation, the
// s3:// name, the HTTP status and S3's error code and message.
// Safe to use from several threads at once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "store/object_store.h"
#include "store/s3_client.h"
#include "store/s3_settings.h"

namespace moerl::store {

class s3_store final : public object_store {
 public:
  // Validates `settings` (errc::invalid_config); no request is sent until first use.
  static result<std::unique_ptr<s3_store>> open(s3_settings settings);

  status put(const std::string& key, const std::string& bytes) override;
  result<std::string> get(const std::string& key) const override;
  result<std::vector<std::string>> list(const std::string& prefix) const override;
  status remove(const std::string& key) override;
  std::string describe() const override;

  // How many parts a put of `size` bytes uses (0: a single PutObject). Part size grows
  // beyond store.multipart_part_bytes when needed to stay within S3's 10000 parts.
  int64_t parts_for(int64_t size) const;
  int64_t part_bytes_for(int64_t size) const;

 private:
  explicit s3_store(s3_settings settings) : client_(std::move(settings)) {}

  std::string object_key(const std::string& key) const;   // prefix + key
  std::string object_path(const std::string& key) const;  // "/bucket/<encoded key>"
  std::string name_of(const std::string& key) const;      // "s3://bucket/prefix/key"
  error response_error(const char* op, const std::string& target, const s3_response& r) const;

  status put_single(const std::string& key, const std::string& bytes);
  status put_multipart(const std::string& key, const std::string& bytes);

  s3_client client_;
};

}  // namespace moerl::store
