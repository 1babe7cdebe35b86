// A local HTTP server that behaves like EC2's IMDSv2 for the paths moerl polls: PUT
// /latest/api/token issues a token; GETs without a valid token get 401; the spot and
// rebalance documents are 404 until a test schedules them. Used by unit and multi-process
// tests (bound to 127.0.0.1 on a free port).
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <thread>

#include <httplib.h>

namespace moerl::test {

class fake_imds {
 public:
  fake_imds() {
    srv_.Put("/latest/api/token", [this](const httplib::Request& req, httplib::Response& res) {
      if (!req.has_header("X-aws-ec2-metadata-token-ttl-seconds")) {
        res.status = 400;
        return;
      }
      std::lock_guard<std::mutex> g(mu_);
      ++token_requests_;
      token_ = "tok-" + std::to_string(token_requests_);
      res.set_content(token_, "text/plain");
    });
    srv_.Get(
        "/latest/meta-data/spot/instance-action",
        [this](const httplib::Request& req, httplib::Response& res) { serve(req, res, spot_); });
    srv_.Get("/latest/meta-data/events/recommendations/rebalance",
             [this](const httplib::Request& req, httplib::Response& res) {
               serve(req, res, rebalance_);
             });
    port_ = srv_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { srv_.listen_after_bind(); });
    // bind_to_any_port already listens: early clients queue in the backlog until accept.
  }
  ~fake_imds() {
    srv_.stop();
    thread_.join();
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void set_spot(const std::string& action, const std::string& time) {
    set_spot_body("{\"action\": \"" + action + "\", \"time\": \"" + time + "\"}");
  }
  void set_spot_body(const std::string& body) {
    std::lock_guard<std::mutex> g(mu_);
    spot_ = body;
  }
  void set_rebalance(const std::string& time) {
    std::lock_guard<std::mutex> g(mu_);
    rebalance_ = "{\"noticeTime\": \"" + time + "\"}";
  }
  void revoke_tokens() {
    std::lock_guard<std::mutex> g(mu_);
    token_ = "revoked";
  }
  int token_requests() const {
    std::lock_guard<std::mutex> g(mu_);
    return token_requests_;
  }
  int unauthorized() const { return unauthorized_.load(); }

 private:
  void serve(const httplib::Request& req, httplib::Response& res, const std::string& doc) {
    std::lock_guard<std::mutex> g(mu_);
    if (req.get_header_value("X-aws-ec2-metadata-token") != token_ || token_.empty() ||
        token_ == "revoked") {
      ++unauthorized_;
      res.status = 401;
      return;
    }
    if (doc.empty()) {
      res.status = 404;
      return;
    }
    res.set_content(doc, "application/json");
  }
  httplib::Server srv_;
  int port_ = 0;
  std::thread thread_;
  mutable std::mutex mu_;
  std::string token_, spot_, rebalance_;
  int token_requests_ = 0;
  std::atomic<int> unauthorized_{0};
};

}  // namespace moerl::test
