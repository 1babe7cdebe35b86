#include "store/s3_client.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>

#include "common/log.h"
#include "store/digest.h"
#include "store/internal/curl_check.h"

namespace moerl::store {

namespace {

// libcurl wants one process-wide init before any handle exists.
void curl_global_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct easy_deleter {
  void operator()(CURL* h) const { curl_easy_cleanup(h); }
};
struct slist_deleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

size_t on_body(char* data, size_t size, size_t nmemb, void* user) {
  static_cast<std::string*>(user)->append(data, size * nmemb);
  return size * nmemb;
}

// Keeps the ETag header; S3 needs each part's ETag to complete a multipart upload.
size_t on_header(char* data, size_t size, size_t nmemb, void* user) {
  const size_t n = size * nmemb;
  std::string_view line(data, n);
  constexpr std::string_view name = "etag:";
  if (line.size() > name.size()) {
    bool match = true;
    for (size_t i = 0; i < name.size(); ++i) {
      if (std::tolower(static_cast<unsigned char>(line[i])) != name[i]) match = false;
    }
    if (match) {
      std::string_view v = line.substr(name.size());
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
      while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' '))
        v.remove_suffix(1);
      *static_cast<std::string*>(user) = std::string(v);
    }
  }
  return n;
}

bool transient_curl_failure(const error& e) {
  // Everything that fails before a response is seen: connect, send, receive, timeout.
  return e.code == errc::io_error;
}

}  // namespace

std::string s3_encode(std::string_view text, bool keep_slash) {
  static const char hex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size() * 3 / 2);
  for (unsigned char c : text) {
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' ||
                            c == '~' || (keep_slash && c == '/');
    if (unreserved) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 0xf];
    }
  }
  return out;
}

s3_client::s3_client(s3_settings settings) : settings_(std::move(settings)) { curl_global_once(); }

result<s3_response> s3_client::send(const s3_request& req) const {
  auto log = logger("store");
  for (int64_t attempt = 0;; ++attempt) {
    auto res = send_once(req);
    const bool retry_status = res.ok() && res->status >= 500;
    const bool retry_error = !res.ok() && transient_curl_failure(res.err());
    if ((!retry_status && !retry_error) || attempt >= settings_.max_retries) return res;
    const auto backoff = std::chrono::milliseconds(std::min<int64_t>(5000, 100ll << attempt));
    log->warn("S3 {} {}: {}; retry {}/{} in {} ms", req.method, req.path,
              res.ok() ? "HTTP " + std::to_string(res->status) : res.err().to_string(), attempt + 1,
              settings_.max_retries, backoff.count());
    std::this_thread::sleep_for(backoff);
  }
}

result<s3_response> s3_client::send_once(const s3_request& req) const {
  std::unique_ptr<CURL, easy_deleter> handle(curl_easy_init());
  if (!handle) return error(errc::io_error, "curl_easy_init failed (out of memory?)");
  CURL* h = handle.get();
  char errbuf[CURL_ERROR_SIZE] = {0};
  s3_response resp;

  const std::string url =
      settings_.endpoint + req.path + (req.query.empty() ? "" : "?" + req.query);
  // libcurl derives the signing scope from this: provider "aws", header prefix "amz".
  const std::string sigv4 = "aws:amz:" + settings_.region + ":s3";
  const std::string payload_hash =
      req.body.empty() ? std::string(empty_sha256_hex) : sha256_hex(req.body);

  std::unique_ptr<curl_slist, slist_deleter> headers;
  auto add_header = [&](const std::string& line) -> status {
    curl_slist* next = curl_slist_append(headers.get(), line.c_str());
    if (next == nullptr) return error(errc::io_error, "curl_slist_append failed (out of memory?)");
    headers.release();
    headers.reset(next);
    return ok_status();
  };
  status st = add_header("x-amz-content-sha256: " + payload_hash);
  if (st && !settings_.session_token.empty())
    st = add_header("x-amz-security-token: " + settings_.session_token);
  const bool has_body =
      std::string_view(req.method) == "PUT" || std::string_view(req.method) == "POST";
  if (st && has_body)
    st = add_header("Content-Type: " + (req.content_type.empty()
                                            ? std::string("application/octet-stream")
                                            : req.content_type));
  // Every header given here is signed. So no "Expect:" line to switch off libcurl's
  // 100-continue: libcurl 7.88 signs such a removal line as an empty header it never
  // sends, and S3 then refuses the signature. (100-continue lets S3 refuse before the
  // body is sent, which is what we want for large parts anyway.)
  if (!st) return st.err();

  MOERL_CURL_CHECK(curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf), nullptr);
  MOERL_CURL_CHECK(curl_easy_setopt(h, CURLOPT_URL, url.c_str()), errbuf);
  MOERL_CURL_CHECK(curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https"), errbuf);
  MOERL_CURL_CHECK(curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L), errbuf);
  MOERL_CURL_CHECK(
      curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(settings_.request_timeout_ms)),
      errbuf);
  MOERL_CURL_CHECK(
      curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                       static_cast<long>(std::min<int64_t>(10000, settings_.request_timeout_ms))),
      errbuf);
  MOERL_CURL_CHECK(curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4.c_str()), errbuf);
  MOERL_CURL_CHECK(curl_easy_setopt(h, CURLOPT_USERNAME, settings_.access_key_id.c_str()), errbuf);
  MOERL_CURL_CHECK(curl_easy_setopt(h, CURLOPT_PASSWORD, settings_.secret_access_key.c_str()),
                   errbuf);
  MOERL_CURL_CHECK(curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.get()), errbuf);
  MOERL_CURL_CHECK(curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body), errbuf);
  MOERL_CURL_CHECK(curl_easy_setopt(h, CURLOPT_WRITEDATA, &resp.body), errbuf);
  MOERL_CURL_CHECK(curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header), errbuf);
  MOERL_CURL_CHECK(curl_easy_setopt(h, CURLOPT_HEADERDATA, &resp.etag), errbuf);
  if (has_body) {
    // The body goes as POSTFIELDS (no copy), so libcurl knows it up front; the method is
    // then overridden for PUT. A null pointer would make libcurl read stdin instead.
    static const char empty[] = "";
    MOERL_CURL_CHECK(curl_easy_setopt(h, CURLOPT_POST, 1L), errbuf);
    MOERL_CURL_CHECK(
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size())),
        errbuf);
    MOERL_CURL_CHECK(
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, req.body.empty() ? empty : req.body.data()),
        errbuf);
  }
  if (std::string_view(req.method) != "GET" && std::string_view(req.method) != "POST") {
    MOERL_CURL_CHECK(curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method), errbuf);
  }
  MOERL_CURL_CHECK(curl_easy_perform(h), errbuf);
  MOERL_CURL_CHECK(curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp.status), errbuf);
  logger("store")->debug("S3 {} {}{}{} -> HTTP {} ({} bytes sent, {} received)", req.method,
                         req.path, req.query.empty() ? "" : "?", req.query, resp.status,
                         req.body.size(), resp.body.size());
  return resp;
}

}  // namespace moerl::store
