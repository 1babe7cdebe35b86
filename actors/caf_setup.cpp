#include "actors/caf_setup.h"

#include <fstream>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include "actors/internal/openssl_error_queue.h"
#include "actors/tls_acceptor.h"
#include "common/config.h"
#include "common/log.h"
#include "common/loopback.h"

namespace moerl::actors {

result<control_plane_options> control_plane_options::from_config(const config& cfg) {
  control_plane_options o;
  o.heartbeat_interval_ms = cfg.get_int("node.heartbeat_interval_ms");
  o.connection_timeout_ms = cfg.get_int("node.connection_timeout_ms");
  o.request_timeout_ms = cfg.get_int("node.request_timeout_ms");
  o.tls = control_plane_tls(cfg);
  o.tls_certificate = cfg.get_string("node.tls_certificate");
  o.tls_key = cfg.get_string("node.tls_key");
  o.tls_ca = cfg.get_string("node.tls_ca");
  o.tls_handshake_timeout_ms = cfg.get_int("node.tls_handshake_timeout_ms");
  o.tls_max_pending_handshakes = cfg.get_int("node.tls_max_pending_handshakes");
  o.tls_max_pending_per_peer = cfg.get_int("node.tls_max_pending_per_peer");
  o.control_nice = static_cast<int>(cfg.get_int("node.control_nice"));
  if (o.heartbeat_interval_ms <= 0)
    return error(errc::invalid_config,
                 "node.heartbeat_interval_ms must be > 0 (0 disables failure detection)");
  if (o.connection_timeout_ms <= o.heartbeat_interval_ms)
    return error(errc::invalid_config,
                 "node.connection_timeout_ms must exceed node.heartbeat_interval_ms");
  if (o.request_timeout_ms <= 0)
    return error(errc::invalid_config,
                 "node.request_timeout_ms must be > 0 (no infinite remote requests)");
  if (o.tls) {
    for (auto* kv : {&o.tls_certificate, &o.tls_key, &o.tls_ca}) {
      const char* key = kv == &o.tls_certificate ? "node.tls_certificate"
                        : kv == &o.tls_key       ? "node.tls_key"
                                                 : "node.tls_ca";
      if (kv->empty()) {
        const std::string host = cfg.get_string("node.host");
        return error(errc::invalid_config,
                     std::string(key) + " is not set and the control plane must run TLS: " +
                         (is_loopback_host(host)
                              ? std::string("node.tls or another node.tls_* file is set")
                              : "node.host is " + host +
                                    " (not loopback), where plain CAF would take any peer's "
                                    "messages") +
                         "; give every node the cluster's CA and a certificate it signed "
                         "(`moerl ca init DIR` makes them)");
      }
      if (!std::ifstream(*kv))
        return error(errc::invalid_config, std::string(key) + ": cannot read '" + *kv + "'");
    }
    // caf_openssl's links survive each other's failures only through the guard.
    if (auto guarded = check_openssl_error_queue_guard(); !guarded) return guarded.err();
  }
  return o;
}

node_caf_config::node_caf_config(const control_plane_options& o) : opts(o) {
  load<caf::io::middleman>();
  if (o.tls) {
    load<caf::openssl::manager>();
    // Setting these turns on peer verification (SSL_VERIFY_PEER|FAIL_IF_NO_PEER_CERT) on
    // both sides: mutual TLS. CAF checks no host name, so use one CA per cluster.
    openssl_certificate = o.tls_certificate;
    openssl_key = o.tls_key;
    openssl_cafile = o.tls_ca;
  }
  set("middleman.heartbeat-interval",
      caf::timespan{std::chrono::milliseconds(o.heartbeat_interval_ms)});
  set("middleman.connection-timeout",
      caf::timespan{std::chrono::milliseconds(o.connection_timeout_ms)});
  // Nine processes share two cores in `moerl up`: a small scheduler per node avoids
  // oversubscription (CAF defaults to one worker per core and more).
  set("scheduler.max-threads", o.scheduler_threads);
  // An idle CAF worker spins, then sleeps 50 us at a time for 500 attempts before it waits
  // on its condition variable. A node gets a message every few milliseconds, so its workers
  // never reached the wait: ~20,000 wake-ups per second per thread, and with every node doing
  // it, 43% of a default `moerl up`'s CPU was the kernel switching to and from those sleeps
  // (perf: finish_task_switch). So an idle worker spins briefly and then waits.
  set("work-stealing.aggressive-poll-attempts", static_cast<size_t>(10));
  set("work-stealing.moderate-poll-attempts", static_cast<size_t>(0));
  set("work-stealing.relaxed-steal-interval", static_cast<size_t>(1));
  // The wait's timeout is when the worker looks for work to steal. A message an actor sends
  // inside the process lands in the sender's worker queue with no wake-up: with several
  // workers, one busy with a long job leaves it to another, which must come and take it
  // (CAF's 10 ms default cost up to 10 ms a hop), so they look every millisecond. A lone
  // worker has nobody to steal from and is woken for everything sent from outside it, so it
  // sleeps until then (100 ms at most): waking every millisecond was ~800 switches a second in each
  // of the nine processes, and one worker instead of two halved a default run's context switches
  // (3.4-3.7 M to 1.5-1.7 M per 400 iterations; CPU 83-89 s to 57-64 s; 5 Dec).
  set("work-stealing.relaxed-sleep-duration",
      caf::timespan{std::chrono::milliseconds(o.scheduler_threads > 1 ? 1 : 100)});
  // An actor gives its worker back after this many messages. CAF's default is no bound: an
  // actor resumed with a full mailbox keeps the worker until the mailbox is empty. With one
  // worker per node, the middleman's BASP worker, which deserializes every message arriving
  // from other nodes, runs on that same thread: while console requests kept the coordinator's
  // mailbox full (the live-port fuzzer, authenticated HTTP and admin requests from every port
  // at once), no heartbeat was deserialized for 4 s and every node was declared dead at once.
  set("scheduler.max-throughput", static_cast<size_t>(16));
  set("logger.console", caf::atom("none"));
}

result<uint16_t> publish_actor(caf::actor_system& sys, const control_plane_options& o,
                               const caf::actor& a, const std::string& host, uint16_t port) {
  if (o.tls)
    return publish_tls(sys, a, host, port, {o.tls_certificate, o.tls_key, o.tls_ca},
                       {o.tls_handshake_timeout_ms, o.tls_max_pending_handshakes,
                        o.tls_max_pending_per_peer, o.control_nice});
  auto res = sys.middleman().publish(a, port, host.c_str(), true);
  if (!res)
    return error(errc::io_error, "cannot publish on " + host + ":" + std::to_string(port) + ": " +
                                     sys.render(res.error()));
  return *res;
}

result<caf::actor> connect_with_retry(caf::actor_system& sys, const control_plane_options& o,
                                      const std::string& host, uint16_t port, int64_t give_up_ms) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(give_up_ms);
  std::string last;
  int64_t pause_ms = 50;
  for (;;) {
    auto res = o.tls ? caf::openssl::remote_actor(sys, host, port)
                     : sys.middleman().remote_actor(host, port);
    if (res) return *res;
    last = sys.render(res.error());
    if (std::chrono::steady_clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));  // retry pacing, not work
    pause_ms = std::min<int64_t>(pause_ms * 2, 500);
  }
  return error(errc::peer_dead, "cannot connect to " + host + ":" + std::to_string(port) +
                                    " within " + std::to_string(give_up_ms) + " ms: " + last);
}

std::string error_text(caf::actor_system& sys, const caf::error& e) {
  // make_error(sec::runtime_error, why) keeps `why` as the context's one element; render()
  // would nest it, escaped, inside "system_error(runtime_error, (...))" per level.
  const caf::message& ctx = e.context();
  if (ctx.match_elements<std::string>()) return ctx.get_as<std::string>(0);
  return sys.render(e);
}

result<std::pair<std::string, uint16_t>> parse_host_port(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    return error(errc::invalid_argument, "'" + text + "' is not HOST:PORT");
  std::string host = text.substr(0, colon), p = text.substr(colon + 1);
  if (p.find_first_not_of("0123456789") != std::string::npos || p.size() > 5 ||
      std::stoul(p) > 65535)
    return error(errc::invalid_argument, "'" + text + "': port must be 0..65535");
  return std::make_pair(host, static_cast<uint16_t>(std::stoul(p)));
}

}  // namespace moerl::actors
