// Polls the EC2 instance metadata service (IMDSv2) for the two interruption signals a Spot
// node can get, and turns the first one seen into an interruption_notice:
//   GET /latest/meta-data/spot/instance-action      -> {"action":"terminate","time":"...Z"}
//   GET /latest/meta-data/events/recommendations/rebalance -> {"noticeTime":"...Z"}
// Both answer 404 while there is nothing to report. IMDSv2 needs a session token first:
//   PUT /latest/api/token  (X-aws-ec2-metadata-token-ttl-seconds: N)  -> token text
// sent back as X-aws-ec2-metadata-token; a 401 means the token expired and is refreshed.
// The endpoint is configurable (imds.endpoint) so tests point it at a local HTTP server.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "actors/interruption.h"
#include "common/error.h"

namespace moerl {
class config;
}

namespace moerl::actors {

struct imds_options {
  std::string endpoint = "http://169.254.169.254";  // scheme://host[:port]
  int64_t poll_interval_ms = 1000;
  int64_t request_timeout_ms = 1000;
  int64_t token_ttl_s = 21600;
  // A rebalance recommendation carries no deadline; the node assumes this much time.
  int64_t rebalance_grace_ms = 120000;

  static imds_options from_config(const config& cfg);
};

// Parses "2026-11-29T12:00:00Z" (the format IMDS uses) into Unix milliseconds.
result<int64_t> parse_imds_time(const std::string& text);

// One poll, synchronously: returns the notice (node field left empty) if IMDS reports one, nothing
// if both documents are 404, or an error naming the HTTP call that failed. Stateless except for the
// token cache passed in (refreshed when empty or on 401).
class imds_client {
 public:
  explicit imds_client(imds_options opts);
  result<std::optional<messages::interruption_notice>> poll_once();

 private:
  status refresh_token();
  // GET with the token; returns body on 200, nullopt on 404, error otherwise.
  result<std::optional<std::string>> get(const std::string& path);

  imds_options opts_;
  std::string token_;
};

// Background poller: calls `on_notice` with the first rebalance recommendation seen (once)
// and with the Spot notice (once), then stops; a Spot notice seen first ends it at once.
// Poll errors are logged (rate-limited) and retried; they never stop the node.
class imds_poller {
 public:
  imds_poller(imds_options opts,
              std::function<void(const messages::interruption_notice&)> on_notice);
  ~imds_poller();
  imds_poller(const imds_poller&) = delete;
  imds_poller& operator=(const imds_poller&) = delete;

 private:
  void run();
  imds_options opts_;
  std::function<void(const messages::interruption_notice&)> on_notice_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace moerl::actors
