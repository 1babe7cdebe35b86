#include "actors/imds_poller.h"

#include <ctime>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "common/config.h"
#include "common/log.h"

namespace moerl::actors {

imds_options imds_options::from_config(const config& cfg) {
  imds_options o;
  o.endpoint = cfg.get_string("imds.endpoint");
  o.poll_interval_ms = cfg.get_int("imds.poll_interval_ms");
  o.request_timeout_ms = cfg.get_int("imds.request_timeout_ms");
  o.token_ttl_s = cfg.get_int("imds.token_ttl_s");
  o.rebalance_grace_ms = cfg.get_int("imds.rebalance_grace_ms");
  return o;
}

result<int64_t> parse_imds_time(const std::string& text) {
  std::tm tm{};
  int y, mo, d, h, mi, s;
  char z = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%c", &y, &mo, &d, &h, &mi, &s, &z) != 7 ||
      z != 'Z' || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60)
    return error(errc::malformed_message, "IMDS time '" + text + "' is not YYYY-MM-DDTHH:MM:SSZ");
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  return static_cast<int64_t>(timegm(&tm)) * 1000;
}

imds_client::imds_client(imds_options opts) : opts_(std::move(opts)) {}

namespace {
httplib::Client make_client(const imds_options& o) {
  httplib::Client c(o.endpoint);
  auto to = std::chrono::milliseconds(o.request_timeout_ms);
  c.set_connection_timeout(to);
  c.set_read_timeout(to);
  c.set_write_timeout(to);
  return c;
}
}  // namespace

status imds_client::refresh_token() {
  auto c = make_client(opts_);
  httplib::Headers h{{"X-aws-ec2-metadata-token-ttl-seconds", std::to_string(opts_.token_ttl_s)}};
  auto res = c.Put("/latest/api/token", h, "", "text/plain");
  if (!res)
    return error(errc::io_error, "IMDS PUT " + opts_.endpoint + "/latest/api/token failed: " +
                                     httplib::to_string(res.error()));
  if (res->status != 200 || res->body.empty())
    return error(errc::io_error,
                 "IMDS PUT /latest/api/token answered HTTP " + std::to_string(res->status));
  token_ = res->body;
  return ok_status();
}

result<std::optional<std::string>> imds_client::get(const std::string& path) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (token_.empty()) {
      auto st = refresh_token();
      if (!st) return st.err();
    }
    auto c = make_client(opts_);
    auto res = c.Get(path, httplib::Headers{{"X-aws-ec2-metadata-token", token_}});
    if (!res)
      return error(errc::io_error, "IMDS GET " + opts_.endpoint + path +
                                       " failed: " + httplib::to_string(res.error()));
    if (res->status == 200) return std::optional<std::string>(res->body);
    if (res->status == 404) return std::optional<std::string>();
    if (res->status == 401) {  // token expired or revoked: get a new one, once
      token_.clear();
      continue;
    }
    return error(errc::io_error,
                 "IMDS GET " + path + " answered HTTP " + std::to_string(res->status));
  }
  return error(errc::unauthorized, "IMDS GET " + path + " refused a freshly issued token");
}

result<std::optional<messages::interruption_notice>> imds_client::poll_once() {
  using nlohmann::json;
  auto spot = get("/latest/meta-data/spot/instance-action");
  if (!spot) return spot.err();
  if (*spot) {
    auto j = json::parse(**spot, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("time") || !j["time"].is_string())
      return error(errc::malformed_message,
                   "IMDS spot/instance-action body lacks a string 'time': " + **spot);
    auto t = parse_imds_time(j["time"].get<std::string>());
    if (!t) return t.err();
    auto n = make_notice("", messages::interruption_source::imds_spot, *t,
                         "spot/instance-action " + j.value("action", std::string("terminate")));
    return std::optional<messages::interruption_notice>(n);
  }
  auto reb = get("/latest/meta-data/events/recommendations/rebalance");
  if (!reb) return reb.err();
  if (*reb) {
    auto j = json::parse(**reb, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("noticeTime"))
      return error(errc::malformed_message, "IMDS rebalance body lacks 'noticeTime': " + **reb);
    auto n = rebalance_notice(
        "", opts_.rebalance_grace_ms,
        "rebalance recommendation (IMDS noticeTime " + j["noticeTime"].dump() + ")");
    return std::optional<messages::interruption_notice>(n);
  }
  return std::optional<messages::interruption_notice>();
}

imds_poller::imds_poller(imds_options opts,
                         std::function<void(const messages::interruption_notice&)> on_notice)
    : opts_(std::move(opts)), on_notice_(std::move(on_notice)) {
  thread_ = std::thread([this] { run(); });
}

imds_poller::~imds_poller() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void imds_poller::run() {
  imds_client client(opts_);
  int64_t errors = 0;
  bool rebalance_delivered = false;
  for (;;) {
    auto r = client.poll_once();
    if (!r) {
      // Off EC2 every poll fails; log the first and then every 60th, not each one.
      if (errors++ % 60 == 0)
        logger("imds")->warn("poll failed ({} so far): {}", errors, r.err().to_string());
    } else if (*r && !(rebalance_delivered &&
                       (*r)->source == messages::interruption_source::imds_rebalance)) {
      logger("imds")->warn("interruption notice from IMDS: {} deadline in {} ms",
                           messages::interruption_source_name((*r)->source),
                           static_cast<int64_t>((*r)->deadline_unix_ms) - unix_now_ms());
      on_notice_(**r);
      // A rebalance recommendation is often followed by the Spot notice itself, whose real
      // deadline can be earlier than the grace assumed for the recommendation: keep polling
      // for it (the recommendation document stays up and is not delivered again).
      if ((*r)->source != messages::interruption_source::imds_rebalance) return;
      rebalance_delivered = true;
    }
    std::unique_lock<std::mutex> lk(mu_);
    if (cv_.wait_for(lk, std::chrono::milliseconds(opts_.poll_interval_ms), [&] { return stop_; }))
      return;
  }
}

}  // namespace moerl::actors
