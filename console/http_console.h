// The coordinator's HTTP console on console.http_address (default 127.0.0.1:7412): the
// dashboard page (embedded in the binary, console/web/), the JSON API under /api/v1/, the
// Prometheus /metrics and the Chrome trace at /api/v1/trace. console/CONSOLE.md ("HTTP console")
// documents the routes; docs/GUIDE.md lists them with the metrics.
//
// Reads go to the coordinator actor as the same admin verbs the ZeroMQ console sends
// (console/admin_channel.h), so `moerl console VERB` and GET /api/v1/VERB agree. Every route but
// the page's static files needs `Authorization: Bearer <token>`: console.viewer_token reads,
// console.operator_token also acts (POST /api/v1/actions). No or a wrong token: 401; a viewer
// acting: 403. Bad input (unknown path, wrong method, bad JSON, a body over
// console.http_max_body_bytes, a slow client) gets a 4xx JSON error {"error": {...}} and the
// server keeps serving.
//
// Runs httplib's listener and a sampler (the autoscaling signal's history) on their own
// threads; stop() (or the destructor) ends them.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/peer_connection_limit.h"
#include "console/admin_channel.h"
#include "console/autoscale_signal.h"
#include "console/peer_rate_limit.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace moerl {
class config;
}

namespace moerl::console {

struct http_console_options {
  std::string address;            // HOST:PORT; port 0 picks a free one
  std::string admin_token;        // console.token: what the coordinator's admin verbs check
  std::string viewer_token;       // console.viewer_token
  std::string operator_token;     // console.operator_token
  std::string tls_cert, tls_key;  // console.tls_cert / tls_key: HTTPS when set
  size_t max_body_bytes = 65536;
  double requests_per_s = 100;  // console.http_requests_per_s, per client address; 0: no limit
  // Connections held open at once, in all (console.http_max_connections: also the number of
  // worker threads, one per connection) and from one client address
  // (console.http_max_connections_per_peer); one over either is closed as it is accepted.
  int64_t max_connections = 64;
  int64_t max_connections_per_peer = 16;
  int request_timeout_ms = 5000;
  // How long a connection may sit idle or stall a read or write before it is closed (a slow
  // client holds its worker at most this long; not a config key).
  int idle_timeout_s = 5;
  nlohmann::json planes;  // each plane's transport and provider, as configured

  // From the config; errc::invalid_config when the address is not HOST:PORT, or is not a
  // loopback address while a token is still its built-in default, or when only one of
  // console.tls_cert and console.tls_key is set, or either file cannot be read as PEM, or
  // the key is not the certificate's (the error names the key, the file and OpenSSL's
  // reason).

  static result<http_console_options> from_config(const config& cfg, int request_timeout_ms);
};

// The HTTP console's options as the coordinator will check them (nothing when it is off), so
// `moerl up` refuses a bad one up front with the same words (exit 2).
status check_http_console_config(const config& cfg);

// Each plane's transport and provider as the config sets them (the nodes view's `planes`).
nlohmann::json configured_planes(const config& cfg);

class http_console {
 public:
  // Binds now (a taken port is an error naming the address), then serves.
  static result<std::unique_ptr<http_console>> start(admin_caller_factory coordinator,
                                                     http_console_options opts);
  ~http_console();
  void stop();
  const std::string& address() const { return address_; }  // HOST:PORT actually bound
  bool tls() const { return !opts_.tls_cert.empty(); }
  // Requests refused before any route ran, by cause (also in /metrics as
  // moerl_http_console_refused_total{reason}): over the client's rate (429), a body over
  // console.http_max_body_bytes (413), a request httplib could not parse (400); and
  // connections closed as they were accepted: too_many_connections (over
  // console.http_max_connections), too_many_from_peer (over
  // console.http_max_connections_per_peer).
  nlohmann::json refusals() const;
  // Connections held open now (admitted, not yet ended).
  int64_t open_connections() const { return connections_ ? connections_->open() : 0; }

 private:
  http_console() = default;
  void routes();
  // A GET route for readers (viewer or operator token; else 401) ...
  void read_route(const std::string& path,
                  std::function<void(const httplib::Request&, httplib::Response&)> answer);
  // ... and one answered from a coordinator snapshot (its refusal passed on as is).
  void snapshot_route(const std::string& path,
                      std::function<void(nlohmann::json& snapshot, httplib::Response&)> answer);
  void sample();
  // The listening thread: httplib's loop, started again on the same address whenever it ends
  // without stop() (httplib 0.11 closes the listening socket on any accept() error but EMFILE,
  // and the console would stop answering while its process lives on).
  void listen_until_stopped(const std::string& host, int port);
  // The coordinator's reply to one admin verb, as the HTTP status and JSON body to send.
  std::pair<int, nlohmann::json> ask(
      const std::string& verb, const std::vector<std::string>& args = {},
      const std::vector<std::pair<std::string, std::string>>& options = {});
  nlohmann::json autoscale(const nlohmann::json& snapshot);

  admin_caller_factory coordinator_;
  http_console_options opts_;
  // Before server_: its listening thread and workers count here until the server is gone.
  std::unique_ptr<peer_connection_limit> connections_;
  std::unique_ptr<httplib::Server> server_;
  std::string address_;
  std::thread listener_, sampler_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> listener_done_{false};
  std::mutex tracker_mu_;
  replacement_tracker tracker_;
  std::unique_ptr<peer_rate_limit> rate_limit_;
  std::atomic<uint64_t> refused_too_large_{0}, refused_bad_request_{0};
};

// The coordinator's HTTP console as the config sets it: nullptr when console.http_address is
// "" (off); an error for a bad option or a port it cannot bind.
result<std::unique_ptr<http_console>> start_http_console(admin_caller_factory coordinator,
                                                         const config& cfg, int request_timeout_ms);

}  // namespace moerl::console
