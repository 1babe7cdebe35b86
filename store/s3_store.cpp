#include "store/s3_store.h"

#include <atomic>
#include <mutex>
#include <optional>
#include <thread>

#include "common/log.h"
#include "store/key_rules.h"
#include "store/s3_xml.h"

namespace moerl::store {

namespace {

errc code_for_status(long status) {
  if (status == 404) return errc::not_found;
  if (status == 401 || status == 403) return errc::unauthorized;
  return errc::io_error;
}

}  // namespace

result<std::unique_ptr<s3_store>> s3_store::open(s3_settings settings) {
  if (auto st = validate(settings); !st) return st.err();
  return std::unique_ptr<s3_store>(new s3_store(std::move(settings)));
}

std::string s3_store::object_key(const std::string& key) const {
  const auto& p = client_.settings().prefix;
  return p.empty() ? key : p + "/" + key;
}

std::string s3_store::object_path(const std::string& key) const {
  return "/" + client_.settings().bucket + "/" + s3_encode(object_key(key), true);
}

std::string s3_store::name_of(const std::string& key) const {
  return "s3://" + client_.settings().bucket + "/" + object_key(key);
}

std::string s3_store::describe() const {
  const auto& s = client_.settings();
  return "s3://" + s.bucket + (s.prefix.empty() ? "" : "/" + s.prefix) + " (endpoint " +
         s.endpoint + ", region " + s.region + ")";
}

error s3_store::response_error(const char* op, const std::string& target,
                               const s3_response& r) const {
  const std::string code = xml_first(r.body, "Code").value_or("");
  const std::string message = xml_first(r.body, "Message").value_or("");
  std::string text = std::string("S3 ") + op + " " + target + ": HTTP " + std::to_string(r.status);
  if (!code.empty()) text += " " + code;
  if (!message.empty()) text += ": " + message;
  if (code.empty() && message.empty() && !r.body.empty()) text += ": " + r.body.substr(0, 200);
  // A missing bucket is a configuration problem, not an absent object: callers that treat
  // not_found as "start fresh" (no checkpoint yet) must not silently do so.
  const errc kind = code == "NoSuchBucket" ? errc::invalid_config : code_for_status(r.status);
  return error(kind, text);
}

int64_t s3_store::part_bytes_for(int64_t size) const {
  // Every part but the last has exactly this size, which S3 requires to be >= 5 MiB.
  return std::max(client_.settings().multipart_part_bytes,
                  (size + s3_max_parts - 1) / s3_max_parts);
}

int64_t s3_store::parts_for(int64_t size) const {
  if (size <= client_.settings().multipart_threshold_bytes) return 0;
  const int64_t part = part_bytes_for(size);
  return (size + part - 1) / part;
}

status s3_store::put(const std::string& key, const std::string& bytes) {
  if (auto st = validate_key(key); !st) return st;
  if (parts_for(static_cast<int64_t>(bytes.size())) > 0) return put_multipart(key, bytes);
  return put_single(key, bytes);
}

status s3_store::put_single(const std::string& key, const std::string& bytes) {
  s3_request req;
  req.method = "PUT";
  req.path = object_path(key);
  req.body = bytes;
  auto r = client_.send(req);
  if (!r) return error(r.err().code, "S3 PutObject " + name_of(key) + ": " + r.err().message);
  if (r->status != 200) return response_error("PutObject", name_of(key), *r);
  return ok_status();
}

status s3_store::put_multipart(const std::string& key, const std::string& bytes) {
  const std::string name = name_of(key);
  const std::string path = object_path(key);
  auto log = logger("store");

  s3_request init;
  init.method = "POST";
  init.path = path;
  init.query = "uploads=";
  auto r = client_.send(init);
  if (!r) return error(r.err().code, "S3 CreateMultipartUpload " + name + ": " + r.err().message);
  if (r->status != 200) return response_error("CreateMultipartUpload", name, *r);
  const auto upload_id = xml_first(r->body, "UploadId");
  if (!upload_id || upload_id->empty())
    return error(errc::io_error, "S3 CreateMultipartUpload " + name +
                                     ": response has no UploadId: " + r->body.substr(0, 200));
  const std::string id_query = "uploadId=" + s3_encode(*upload_id, false);

  // Every failure after initiation aborts, so the parts do not linger in the bucket.
  auto abort_with = [&](error e) -> status {
    s3_request abort;
    abort.method = "DELETE";
    abort.path = path;
    abort.query = id_query;
    auto a = client_.send(abort);
    if (!a || (a->status != 204 && a->status != 200))
      log->warn(
          "S3 AbortMultipartUpload {} (upload {}) failed too: {}", name, *upload_id,
          a ? response_error("AbortMultipartUpload", name, *a).to_string() : a.err().to_string());
    return e;
  };

  const int64_t size = static_cast<int64_t>(bytes.size());
  const int64_t num_parts = parts_for(size);
  const int64_t part_bytes = part_bytes_for(size);
  std::vector<std::string> etags(static_cast<size_t>(num_parts));

  // Parts go up on up to store.s3_upload_concurrency connections at once: one TCP stream
  // to S3 tops out far below what a node can send. Workers take the next part number from
  // a shared counter; the first failure stops them all (parts already sent are discarded
  // by the abort).
  std::atomic<int64_t> next_part{0};
  std::atomic<bool> failed{false};
  std::mutex failure_mu;
  std::optional<error> failure;
  auto upload_parts = [&] {
    for (;;) {
      const int64_t i = next_part.fetch_add(1);
      if (i >= num_parts || failed.load()) return;
      const int64_t begin = i * part_bytes;
      const int64_t len = std::min(part_bytes, size - begin);
      s3_request part;
      part.method = "PUT";
      part.path = path;
      // Parameters in canonical (sorted) order: partNumber < uploadId.
      part.query = "partNumber=" + std::to_string(i + 1) + "&" + id_query;
      part.body =
          std::string_view(bytes).substr(static_cast<size_t>(begin), static_cast<size_t>(len));
      auto p = client_.send(part);
      const std::string what =
          name + " part " + std::to_string(i + 1) + "/" + std::to_string(num_parts);
      std::optional<error> e;
      if (!p) {
        e = error(p.err().code, "S3 UploadPart " + what + ": " + p.err().message);
      } else if (p->status != 200) {
        e = response_error("UploadPart", what, *p);
      } else if (p->etag.empty()) {
        e = error(errc::io_error, "S3 UploadPart " + what + ": response has no ETag header");
      } else {
        etags[static_cast<size_t>(i)] = p->etag;  // each worker writes only its own slots
      }
      if (e) {
        std::lock_guard<std::mutex> lock(failure_mu);
        if (!failure) failure = std::move(e);
        failed = true;
        return;
      }
    }
  };
  const int64_t num_workers = std::min<int64_t>(num_parts, client_.settings().upload_concurrency);
  std::vector<std::thread> workers;
  for (int64_t w = 1; w < num_workers; ++w) workers.emplace_back(upload_parts);
  upload_parts();  // this thread is worker 0
  for (auto& t : workers) t.join();
  if (failure) return abort_with(std::move(*failure));

  std::string complete = "<CompleteMultipartUpload>";
  for (int64_t i = 0; i < num_parts; ++i) {
    complete += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" +
                xml_encode(etags[static_cast<size_t>(i)]) + "</ETag></Part>";
  }
  complete += "</CompleteMultipartUpload>";

  s3_request done;
  done.method = "POST";
  done.path = path;
  done.query = id_query;
  done.body = complete;
  done.content_type = "application/xml";
  auto c = client_.send(done);
  if (!c)
    return abort_with(
        error(c.err().code, "S3 CompleteMultipartUpload " + name + ": " + c.err().message));
  // S3 may answer 200 and still report a failure in the body.
  if (c->status != 200 || c->body.find("<Error>") != std::string::npos)
    return abort_with(response_error("CompleteMultipartUpload", name, *c));
  log->debug("S3 multipart put {}: {} bytes in {} parts over {} connections", name, size, num_parts,
             num_workers);
  return ok_status();
}

result<std::string> s3_store::get(const std::string& key) const {
  if (auto st = validate_key(key); !st) return st.err();
  s3_request req;
  req.method = "GET";
  req.path = object_path(key);
  auto r = client_.send(req);
  if (!r) return error(r.err().code, "S3 GetObject " + name_of(key) + ": " + r.err().message);
  if (r->status != 200) return response_error("GetObject", name_of(key), *r);
  return std::move(r->body);
}

result<std::vector<std::string>> s3_store::list(const std::string& prefix) const {
  if (auto st = validate_prefix(prefix); !st) return st.err();
  const auto& s = client_.settings();
  const std::string full_prefix = s.prefix.empty() ? prefix : s.prefix + "/" + prefix;
  const size_t strip = s.prefix.empty() ? 0 : s.prefix.size() + 1;
  std::vector<std::string> keys;
  std::string token;
  for (;;) {
    s3_request req;
    req.method = "GET";
    req.path = "/" + s.bucket;
    // Parameters in canonical (sorted) order.
    if (!token.empty()) req.query += "continuation-token=" + s3_encode(token, false) + "&";
    req.query += "list-type=2";
    if (s.list_max_keys > 0) req.query += "&max-keys=" + std::to_string(s.list_max_keys);
    req.query += "&prefix=" + s3_encode(full_prefix, false);
    auto r = client_.send(req);
    const std::string target = "s3://" + s.bucket + "/" + full_prefix;
    if (!r) return error(r.err().code, "S3 ListObjectsV2 " + target + ": " + r.err().message);
    if (r->status != 200) return response_error("ListObjectsV2", target, *r);
    for (auto& k : xml_all(r->body, "Key")) {
      if (k.size() >= strip) keys.push_back(k.substr(strip));
    }
    if (xml_first(r->body, "IsTruncated").value_or("false") != "true") break;
    auto next = xml_first(r->body, "NextContinuationToken");
    if (!next || next->empty() || *next == token)
      return error(errc::io_error, "S3 ListObjectsV2 " + target +
                                       ": truncated listing without a new continuation token");
    token = *next;
  }
  std::sort(keys.begin(), keys.end());  // S3 sorts by UTF-8 bytes already; make it a contract
  return keys;
}

status s3_store::remove(const std::string& key) {
  if (auto st = validate_key(key); !st) return st;
  s3_request req;
  req.method = "DELETE";
  req.path = object_path(key);
  auto r = client_.send(req);
  if (!r) return error(r.err().code, "S3 DeleteObject " + name_of(key) + ": " + r.err().message);
  if (r->status == 204 || r->status == 200) return ok_status();
  auto e = response_error("DeleteObject", name_of(key), *r);
  if (e.code == errc::not_found) return ok_status();  // S3 itself answers 204 for a missing key
  return e;
}

}  // namespace moerl::store
