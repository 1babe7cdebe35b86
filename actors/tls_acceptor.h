// The accepting side of the TLS control plane (issue 31, docs/SECURITY.md "TLS handshake
// storm"). caf_openssl 0.17.6 runs every server-side handshake on the middleman's one
// multiplexer thread and, while one is pending, keeps the socket registered for writing: a
// connection that sends nothing (or half a ClientHello) makes that thread call SSL_accept in a
// busy loop, forever (no deadline; an accepted connection gets no BASP context, so CAF's
// connection timeout never covers it), and each accept also builds a fresh SSL_CTX from the
// PEM files. A handful of such connections took a core; a thousand stalled every link.
//
// moerl publishes its TLS port through this acceptor instead: one thread of its own accepts,
// runs each handshake non-blocking on epoll (a shared SSL_CTX, the same mutual-TLS settings as
// caf_openssl's), with a deadline and bounds on the handshakes pending in all and per peer
// address, and hands only completed sessions to CAF's multiplexer, as a BASP connection of
// the published actor. Everything refused is closed at once and counted. Outgoing links
// (caf::openssl::remote_actor) are unchanged.
#pragma once

#include <cstdint>
#include <string>

#include <caf/fwd.hpp>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace moerl::actors {

struct tls_accept_limits {
  int64_t handshake_timeout_ms = 5000;  // a handshake not done by then is closed
  int64_t max_pending = 512;            // handshakes in progress, all peers together
  int64_t max_pending_per_peer = 64;    // handshakes in progress from one peer address
  // The accepting thread's nice value while few handshakes are pending (node.control_nice):
  // joins and reconnects are control traffic. With kStormPending or more pending it yields
  // (nice 10) until the storm is down to a few (tls_acceptor.cpp).
  int calm_nice = 0;
};

struct tls_files {
  std::string certificate, key, ca;
};

// Publishes `a` on host:port over TLS (port 0 picks one); returns the bound port. The
// acceptor lives until the middleman closes the port (CAF shutdown).
result<uint16_t> publish_tls(caf::actor_system& sys, const caf::actor& a, const std::string& host,
                             uint16_t port, const tls_files& files,
                             const tls_accept_limits& limits);

// This process's counts since start: {"accepted", "refused": {reason: n}} (reasons:
// too_many_pending, too_many_from_peer, handshake_timeout, handshake_failed, fd_limit).
nlohmann::json tls_accept_counters();

}  // namespace moerl::actors
