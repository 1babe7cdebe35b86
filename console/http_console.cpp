#include "console/http_console.h"
#include "common/json_text.h"

#include <httplib.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "common/config.h"
#include "common/log.h"
#include "common/loopback.h"
#include "common/secret_compare.h"
#include "console/chrome_trace.h"
#include "console/console_client.h"
#include "console/internal/gated_http_server.h"
#include "console/internal/web_assets.h"
#include "console/prometheus_text.h"

namespace moerl::console {

using nlohmann::json;

namespace {

constexpr const char* kJson = "application/json";

// HOST:PORT (the last colon splits, so an IPv6 host may be bracketed or bare).
result<std::pair<std::string, int>> split_address(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size())
    return error(errc::invalid_config,
                 "console.http_address must be HOST:PORT, got '" + address + "'");
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  const std::string port_text = address.substr(colon + 1);
  char* end = nullptr;
  const long port = std::strtol(port_text.c_str(), &end, 10);
  if (!end || *end || port < 0 || port > 65535)
    return error(errc::invalid_config,
                 "console.http_address port must be 0..65535, got '" + port_text + "'");
  return std::make_pair(host, static_cast<int>(port));
}

void send_json(httplib::Response& res, int code, const json& body) {
  res.status = code;
  res.set_content(json_text(body), kJson);
}

void send_error(httplib::Response& res, int code, const std::string& kind,
                const std::string& message) {
  send_json(res, code, json{{"error", {{"code", kind}, {"message", message}}}});
}

// The HTTP status of a coordinator refusal.
int http_status(errc code) {
  switch (code) {
    case errc::unknown_command:
    case errc::invalid_argument:
    case errc::malformed_message: return 400;
    case errc::unauthorized: return 403;
    case errc::unknown_node: return 404;
    case errc::shutting_down: return 409;
    case errc::timeout: return 504;
    default: return 500;
  }
}

enum class role { none, viewer, op };

role role_of(const httplib::Request& req, const http_console_options& o) {
  const std::string h = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  if (h.compare(0, prefix.size(), prefix) != 0) return role::none;
  const std::string token = h.substr(prefix.size());
  // Both compared, each in constant time: the refusal's timing says nothing about either.
  const bool op = secret_equals(token, o.operator_token);
  const bool viewer = secret_equals(token, o.viewer_token);
  return op ? role::op : viewer ? role::viewer : role::none;
}

// Auth for every data route: true when the request may go on (a viewer or the operator);
// otherwise the 401 is already in `res`.
bool allow_reader(const httplib::Request& req, httplib::Response& res,
                  const http_console_options& o) {
  if (role_of(req, o) != role::none) return true;
  res.set_header("WWW-Authenticate", "Bearer realm=\"moerl\"");
  send_error(res, 401, "unauthorized",
             "send Authorization: Bearer <console.viewer_token or console.operator_token>");
  return false;
}

// OpenSSL's reason for the last failure (its error queue, emptied).
std::string openssl_reason() {
  const unsigned long e = ERR_peek_error();  // the first: the cause, not the caller's summary
  char buf[256] = "unknown reason";
  if (e) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return buf;
}

// The files as the HTTPS server will load them (httplib::SSLServer reads them the same way
// but says only that it failed, not why).
status check_tls_files(const std::string& cert, const std::string& key) {
  for (const auto& [name, path] :
       {std::pair<const char*, const std::string&>{"console.tls_cert", cert},
        {"console.tls_key", key}})
    if (::access(path.c_str(), R_OK) != 0)
      return error(errc::invalid_config,
                   std::string(name) + ": cannot read '" + path + "': " + std::strerror(errno));
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_server_method()),
                                                        SSL_CTX_free);
  if (!ctx) return error(errc::io_error, "SSL_CTX_new: " + openssl_reason());
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), cert.c_str()) != 1)
    return error(errc::invalid_config,
                 "console.tls_cert: '" + cert + "' is not a PEM certificate: " + openssl_reason());
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> pkey(nullptr, EVP_PKEY_free);
  if (std::unique_ptr<FILE, decltype(&std::fclose)> f(std::fopen(key.c_str(), "r"), std::fclose); f)
    pkey.reset(PEM_read_PrivateKey(f.get(), nullptr, nullptr, nullptr));
  if (!pkey)
    return error(errc::invalid_config,
                 "console.tls_key: '" + key + "' is not a PEM private key: " + openssl_reason());
  if (SSL_CTX_use_PrivateKey(ctx.get(), pkey.get()) != 1 ||
      SSL_CTX_check_private_key(ctx.get()) != 1)
    return error(errc::invalid_config, "console.tls_key '" + key +
                                           "' is not the key of console.tls_cert '" + cert +
                                           "': " + openssl_reason());
  return ok_status();
}

// GET routes answered from one coordinator verb of the same name.
const char* const kViewVerbs[] = {"status",        "nodes",  "report",  "iterations",
                                  "interruptions", "ledger", "snapshot"};

// How a policy version reaches the rollout nodes, as weights.* configures it (weights/):
// from a checkpoint cache unless weights.from_cache is off, over /dev/shm on the cache's own
// host unless fan-out or weights.same_host_shm says otherwise; the store holds the durable
// copy and serves a miss.
json weights_plane(const config& cfg) {
  const std::string store = cfg.get_string("store.url");
  if (!cfg.get_bool("weights.from_cache"))
    return json{{"transport", "object store (every version)"}, {"url", store}};
  std::string path;
  if (cfg.get_bool("weights.fanout"))
    path = "a fan-out tree over the rollout nodes, its root from a cache (ZeroMQ chunks)";
  else if (cfg.get_bool("weights.same_host_shm"))
    path = "shared memory (/dev/shm) on the cache's host, ZeroMQ chunks from other hosts";
  else
    path = "ZeroMQ chunks";
  return json{{"transport", "checkpoint cache (" + std::to_string(cfg.get_int("weights.nodes")) +
                                " weights node(s))"},
              {"path", path},
              {"store", store + " (durable copy; read on a cache miss)"}};
}

}  // namespace

json configured_planes(const config& cfg) {
  return json{
      {"control", {{"transport", "CAF over TCP"}, {"tls", control_plane_tls(cfg)}}},
      {"admin", {{"transport", "ZeroMQ REQ/REP"}, {"address", cfg.get_string("console.address")}}},
      {"samples", {{"transport", "ZeroMQ PUSH/PULL over TCP"}}},
      {"weights", weights_plane(cfg)},
      {"expert_parallel",
       {{"transport", "libfabric"}, {"provider", cfg.get_string("fabric.provider")}}}};
}

result<http_console_options> http_console_options::from_config(const config& cfg,
                                                               int request_timeout_ms) {
  http_console_options o;
  o.address = cfg.get_string("console.http_address");
  o.admin_token = cfg.get_string("console.token");
  o.viewer_token = cfg.get_string("console.viewer_token");
  o.operator_token = cfg.get_string("console.operator_token");
  o.tls_cert = cfg.get_string("console.tls_cert");
  o.tls_key = cfg.get_string("console.tls_key");
  o.max_body_bytes = static_cast<size_t>(cfg.get_int("console.http_max_body_bytes"));
  o.requests_per_s = static_cast<double>(cfg.get_int("console.http_requests_per_s"));
  o.max_connections = cfg.get_int("console.http_max_connections");
  o.max_connections_per_peer = cfg.get_int("console.http_max_connections_per_peer");
  o.request_timeout_ms = request_timeout_ms;
  o.planes = configured_planes(cfg);
  auto hp = split_address(o.address);
  if (!hp) return hp.err();
  if (o.viewer_token.empty() || o.operator_token.empty())
    return error(errc::invalid_config,
                 "console.viewer_token and console.operator_token must not be empty");
  if (o.viewer_token == o.operator_token)
    return error(
        errc::invalid_config,
        "console.viewer_token and console.operator_token must differ (a viewer could act)");
  const bool defaults = o.viewer_token == find_key("console.viewer_token")->default_value ||
                        o.operator_token == find_key("console.operator_token")->default_value;
  if (!is_loopback_host(hp->first) && defaults)
    return error(errc::invalid_config,
                 "the HTTP console refuses to listen on " + o.address +
                     " (not loopback) while console.viewer_token or console.operator_token is "
                     "still its built-in default; set both to secrets first");
  if (o.tls_cert.empty() != o.tls_key.empty())
    return error(errc::invalid_config,
                 "console.tls_cert and console.tls_key go together: set both (HTTPS) or neither");
  // Not STATUS_TRY: the error is for the operator, who wants the file's words, not our lines.
  if (!o.tls_cert.empty())
    if (auto st = check_tls_files(o.tls_cert, o.tls_key); !st) return st.err();
  return o;
}

status check_http_console_config(const config& cfg) {
  if (cfg.get_string("console.http_address").empty()) return ok_status();
  auto o = http_console_options::from_config(cfg, 0);
  if (!o) return o.err();
  return ok_status();
}

result<std::unique_ptr<http_console>> http_console::start(admin_caller_factory coordinator,
                                                          http_console_options opts) {
  auto hp = split_address(opts.address);
  if (!hp) return hp.err();
  std::unique_ptr<http_console> c(new http_console);
  c->coordinator_ = std::move(coordinator);
  c->opts_ = std::move(opts);
  c->rate_limit_ = std::make_unique<peer_rate_limit>(c->opts_.requests_per_s);
  if (c->opts_.max_connections < 1 || c->opts_.max_connections_per_peer < 1)
    return error(errc::invalid_config,
                 "console.http_max_connections and console.http_max_connections_per_peer must be "
                 "at least 1, got " +
                     std::to_string(c->opts_.max_connections) + " and " +
                     std::to_string(c->opts_.max_connections_per_peer));
  c->connections_ = std::make_unique<peer_connection_limit>(c->opts_.max_connections,
                                                            c->opts_.max_connections_per_peer);
  // One worker per connection the bound admits: an admitted connection never waits for one.
  const auto workers = static_cast<size_t>(c->opts_.max_connections);
  if (c->opts_.tls_cert.empty()) {
    c->server_ = std::make_unique<gated_http_server<httplib::Server>>(*c->connections_, workers);
  } else {
    if (auto st = check_tls_files(c->opts_.tls_cert, c->opts_.tls_key); !st) return st.err();
    auto tls = std::make_unique<gated_http_server<httplib::SSLServer>>(
        *c->connections_, workers, c->opts_.tls_cert.c_str(), c->opts_.tls_key.c_str());
    if (!tls->is_valid())
      return error(errc::invalid_config, "the HTTP console cannot serve HTTPS with " +
                                             c->opts_.tls_cert + " and " + c->opts_.tls_key + ": " +
                                             openssl_reason());
    c->server_ = std::move(tls);
  }
  auto& srv = *c->server_;
  srv.set_payload_max_length(c->opts_.max_body_bytes);
  // A slow client holds one worker thread for at most this long; the job does not wait on it.
  srv.set_read_timeout(c->opts_.idle_timeout_s, 0);
  srv.set_write_timeout(c->opts_.idle_timeout_s, 0);
  srv.set_keep_alive_timeout(c->opts_.idle_timeout_s);
  c->routes();
  int port = hp->second;
  if (port == 0) {
    port = srv.bind_to_any_port(hp->first);
    if (port < 0) return error(errc::io_error, "HTTP console cannot listen on " + c->opts_.address);
  } else if (!srv.bind_to_port(hp->first, port)) {
    return error(errc::io_error, "HTTP console cannot listen on " + c->opts_.address +
                                     " (in use, another moerl up?, or not an address of this "
                                     "machine); set console.http_address");
  }
  c->address_ = hp->first + ":" + std::to_string(port);
  c->listener_ =
      std::thread([p = c.get(), host = hp->first, port] { p->listen_until_stopped(host, port); });
  c->sampler_ = std::thread([p = c.get()] { p->sample(); });
  return c;
}

http_console::~http_console() { stop(); }

json http_console::refusals() const {
  return json{
      {"rate_limited", rate_limit_ ? rate_limit_->refused() : 0},
      {"body_too_large", refused_too_large_.load()},
      {"bad_request", refused_bad_request_.load()},
      {"too_many_connections", connections_ ? connections_->refused_too_many_connections() : 0},
      {"too_many_from_peer", connections_ ? connections_->refused_too_many_from_peer() : 0}};
}

void http_console::listen_until_stopped(const std::string& host, int port) {
  for (;;) {
    server_->listen_after_bind();
    if (stop_) break;
    const int why = errno;  // accept()'s: httplib's loop only closes the socket after it
    logger("console")->error(
        "the HTTP console's listening loop ended (accept: {}); listening on {}:{} again",
        std::strerror(why), host, port);
    bool bound = false;
    for (int attempt = 0; !bound && !stop_; ++attempt) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      bound = server_->bind_to_port(host, port);
      if (!bound && attempt == 0)
        logger("console")->error("the HTTP console cannot bind {}:{} again ({}); retrying", host,
                                 port, std::strerror(errno));
    }
    if (!bound) break;
  }
  listener_done_ = true;
}

void http_console::stop() {
  stop_ = true;
  // httplib's stop() does nothing while its loop is not running, and the listening thread may
  // be between binding the address again and starting the loop: stop until the thread is done.
  while (server_ && listener_.joinable() && !listener_done_) {
    if (server_->is_running()) server_->stop();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (listener_.joinable()) listener_.join();
  if (sampler_.joinable()) sampler_.join();
}

std::pair<int, json> http_console::ask(
    const std::string& verb, const std::vector<std::string>& args,
    const std::vector<std::pair<std::string, std::string>>& options) {
  messages::admin_request req;
  req.token = opts_.admin_token;
  req.command = verb;
  req.args = args;
  req.options = options;
  if (auto st = check_console_request(req); !st)
    return {400,
            json{{"error", {{"code", errc_name(st.err().code)}, {"message", st.err().message}}}}};
  auto rep = ask_admin(coordinator_(), req, opts_.request_timeout_ms);
  if (!rep.ok)
    return {http_status(rep.err.code),
            json{{"error", {{"code", errc_name(rep.err.code)}, {"message", rep.err.message}}}}};
  auto body = json::parse(rep.body_json, nullptr, false);
  if (body.is_discarded())
    return {502, json{{"error",
                       {{"code", "malformed_message"},
                        {"message", "the coordinator's reply is not JSON"}}}}};
  return {200, body};
}

json http_console::autoscale(const json& snapshot) {
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  std::lock_guard<std::mutex> lock(tracker_mu_);
  tracker_.observe(snapshot.value("nodes", json::array()), now);
  return autoscale_json(snapshot, tracker_, now);
}

// Watches the nodes once a second for the autoscaling signal's replacement times (a request
// for /metrics or /api/v1/autoscale also looks, so a scrape is never older than its reply).
void http_console::sample() {
  while (!stop_) {
    // Node states only: the trainer's per-iteration lists are most of `nodes` late in a run.
    auto [code, nodes] = ask("nodes", {}, {{"history", "0"}});
    if (code == 200) {
      const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::steady_clock::now().time_since_epoch())
                              .count();
      std::lock_guard<std::mutex> lock(tracker_mu_);
      tracker_.observe(nodes, now);
    }
    for (int i = 0; i < 5 && !stop_; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void http_console::read_route(
    const std::string& path,
    std::function<void(const httplib::Request&, httplib::Response&)> answer) {
  server_->Get(path, [this, answer = std::move(answer)](const httplib::Request& req,
                                                        httplib::Response& res) {
    if (allow_reader(req, res, opts_)) answer(req, res);
  });
}

void http_console::snapshot_route(const std::string& path,
                                  std::function<void(json& snapshot, httplib::Response&)> answer) {
  read_route(path,
             [this, answer = std::move(answer)](const httplib::Request&, httplib::Response& res) {
               auto [code, snap] = ask("snapshot");
               if (code != 200) return send_json(res, code, snap);
               answer(snap, res);
             });
}

void http_console::routes() {
  auto& srv = *server_;
  // Every error that reaches the client without a body of ours (httplib's own 400/404/413,
  // a method it does not route) gets the JSON error shape too.
  srv.set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        if (res.status == 413) ++refused_too_large_;
        if (res.status == 400) ++refused_bad_request_;
        std::string why = res.status == 413 ? "request body too large (console.http_max_body_bytes)"
                          : res.status == 404 ? "no such path: " + req.path
                                              : "bad request";
        send_error(res, res.status, res.status == 413 ? "payload_too_large" : "bad_request", why);
        return httplib::Server::HandlerResponse::Handled;
      }));
  // Every request first passes its client's rate (peer_rate_limit.h): a flood from one
  // address gets 429s, costs no coordinator request, and leaves the others their share.
  srv.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
    if (rate_limit_->allow(req.remote_addr, now))
      return httplib::Server::HandlerResponse::Unhandled;
    res.set_header("Retry-After", "1");
    send_error(res, 429, "rate_limited",
               "more than console.http_requests_per_s requests a second from " + req.remote_addr);
    return httplib::Server::HandlerResponse::Handled;
  });
  srv.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {}
        send_error(res, 500, "internal", what);
      });
  // The page and its files: no data in them, so no token (the page asks for one).
  srv.Get(R"(/|/[A-Za-z0-9_.-]+\.(js|css|html|png))",
          [](const httplib::Request& req, httplib::Response& res) {
            const auto* a = find_web_asset(req.path == "/index.html" ? "/" : req.path);
            if (!a) return send_error(res, 404, "not_found", "no such file: " + req.path);
            res.set_content(reinterpret_cast<const char*>(a->data), a->size, a->content_type);
            res.set_header("Cache-Control", "no-cache");
          });
  for (const char* verb : kViewVerbs)
    read_route(std::string("/api/v1/") + verb,
               [this, v = std::string(verb)](const httplib::Request&, httplib::Response& res) {
                 auto [code, body] = ask(v);
                 send_json(res, code, body);
               });
  read_route("/api/v1/planes", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, opts_.planes);
  });
  read_route("/api/v1/whoami", [this](const httplib::Request& req, httplib::Response& res) {
    send_json(res, 200, json{{"role", role_of(req, opts_) == role::op ? "operator" : "viewer"}});
  });
  snapshot_route("/api/v1/autoscale", [this](json& snap, httplib::Response& res) {
    send_json(res, 200, autoscale(snap));
  });
  // The page's one poll: the snapshot with the signal and the trace made from it, so a
  // refresh costs the coordinator one request, not three.
  snapshot_route("/api/v1/dashboard", [this](json& snap, httplib::Response& res) {
    json out{{"autoscale", autoscale(snap)}, {"trace", chrome_trace(snap)}};
    out["snapshot"] = std::move(snap);
    send_json(res, 200, out);
  });
  snapshot_route("/api/v1/trace", [](json& snap, httplib::Response& res) {
    send_json(res, 200, chrome_trace(snap));
  });
  snapshot_route("/metrics", [this](json& snap, httplib::Response& res) {
    std::string text = prometheus_text(snap, autoscale(snap));
    text +=
        "# HELP moerl_http_console_refused_total Requests the HTTP console refused before any "
        "route, and connections it closed as it accepted them, by cause\n"
        "# TYPE moerl_http_console_refused_total counter\n";
    const json refused = refusals();
    for (const auto& [reason, n] : refused.items())
      text += "moerl_http_console_refused_total{reason=\"" + reason + "\"} " + n.dump() + "\n";
    res.set_content(text, "text/plain; version=0.0.4");
  });
  // Actions: {"action": "inject", "kind": "spot|rebalance|kill|sigterm", "node": N,
  // "deadline_s": S} or {"action": "drain", "node": N, "deadline_s": S}; operator only.
  srv.Post("/api/v1/actions", [this](const httplib::Request& req, httplib::Response& res) {
    if (!allow_reader(req, res, opts_)) return;
    if (role_of(req, opts_) != role::op)
      return send_error(res, 403, "forbidden",
                        "actions need the operator token (console.operator_token)");
    auto body = json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object())
      return send_error(res, 400, "bad_json", "the body must be a JSON object");
    auto text = [&](const char* k) -> std::string {
      auto it = body.find(k);
      return it != body.end() && it->is_string() ? it->get<std::string>() : "";
    };
    const std::string action = text("action");
    std::vector<std::string> args;
    if (action == "inject") {
      args = {text("kind"), text("node")};
    } else if (action == "drain") {
      args = {text("node")};
    } else {
      return send_error(res, 400, "unknown_action",
                        "action must be inject or drain, got '" + action + "'");
    }
    std::vector<std::pair<std::string, std::string>> options;
    if (auto d = body.find("deadline_s"); d != body.end()) {
      if (!d->is_number())
        return send_error(res, 400, "invalid_argument", "deadline_s must be a number of seconds");
      options.emplace_back("deadline", json(d->get<double>()).dump());
    }
    // Empty arguments are dropped so the request check names what is missing.
    std::vector<std::string> given;
    for (auto& a : args)
      if (!a.empty()) given.push_back(a);
    if (action == "inject" && text("kind").empty())
      return send_error(res, 400, "invalid_argument",
                        "inject needs kind: one of spot|rebalance|kill|sigterm");
    auto [code, out] = ask(action, given, options);
    send_json(res, code, out);
  });
  // Any other method on any path, and anything else: a JSON 405/404.
  auto not_allowed = [](const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/api/v1/actions" || req.path.rfind("/api/v1/", 0) == 0 ||
        req.path == "/metrics" || find_web_asset(req.path)) {
      res.set_header("Allow", req.path == "/api/v1/actions" ? "POST" : "GET");
      return send_error(res, 405, "method_not_allowed",
                        req.method + " is not allowed on " + req.path);
    }
    send_error(res, 404, "not_found", "no such path: " + req.path);
  };
  srv.Get(".*", [](const httplib::Request& req, httplib::Response& res) {
    send_error(res, 404, "not_found", "no such path: " + req.path);
  });
  srv.Post(".*", not_allowed);
  srv.Put(".*", not_allowed);
  srv.Patch(".*", not_allowed);
  srv.Delete(".*", not_allowed);
  srv.Options(".*", not_allowed);
}

result<std::unique_ptr<http_console>> start_http_console(admin_caller_factory coordinator,
                                                         const config& cfg,
                                                         int request_timeout_ms) {
  if (cfg.get_string("console.http_address").empty()) return std::unique_ptr<http_console>();
  auto o = http_console_options::from_config(cfg, request_timeout_ms);
  if (!o) return o.err();
  auto c = http_console::start(std::move(coordinator), std::move(*o));
  if (!c) return c.err();
  logger("console")->info("HTTP console on {}://{}/", (*c)->tls() ? "https" : "http",
                          (*c)->address());
  return c;
}

}  // namespace moerl::console
