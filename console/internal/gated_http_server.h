// httplib's Server or SSLServer with a bound on the connections it holds: in total and per
// client address (console.http_max_connections, console.http_max_connections_per_peer). A
// connection over either bound is closed with a reset as it is accepted, before anything is
// read from it, and counted by cause (peer_connection_limit); an admitted one gets a worker
// thread at once (the pool has one per connection the bound admits), so nothing queues.
//
// Why this shape. cpp-httplib 0.11's listening loop accepts a socket and hands the task queue
// a job that calls the private virtual process_and_close_socket(sock); the job keeps the
// socket to itself, so a task queue alone cannot refuse it without leaking it, and the
// default queue is unbounded (a fuzz run left 13,441 accepted sockets in CLOSE-WAIT waiting
// for a worker). Here the task queue runs each job at once, on the listening thread, and the
// job's call lands in this class's override of process_and_close_socket, which sees the
// socket: it admits or refuses, and hands an admitted socket to the pool, whose worker serves
// it with httplib's own process_and_close_socket (serve_connection below).
#pragma once

#ifndef MOERL_INSIDE_moerl_console
#error \
    "console/internal/gated_http_server.h is private to moerl_console (console/): include its public headers"
#endif

#include <httplib.h>
#include <sys/socket.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "common/peer_connection_limit.h"
#include "common/socket_peer.h"

namespace moerl::console {

// httplib's own serving of one accepted socket (reads requests until the connection ends,
// then closes it), for an admitted connection. Declared private in httplib 0.11, so it is
// reached by its exported symbol (gated_http_server.cpp); a changed library fails the link.
bool serve_connection(httplib::Server* server, int sock);
bool serve_connection(httplib::SSLServer* server, int sock);

// Base: httplib::Server or httplib::SSLServer (its constructor's arguments follow `gate`).
// `gate` counts and must outlive the server.
template <class Base>
class gated_http_server final : public Base {
 public:
  template <class... Args>
  explicit gated_http_server(peer_connection_limit& gate, size_t num_workers, Args&&... args)
      : Base(std::forward<Args>(args)...),
        gate_(gate),
        pool_(std::make_unique<httplib::ThreadPool>(num_workers)) {
    // Called as the listening loop starts, on the bound socket: httplib listens with a
    // backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, compiled into Debian's library), so a pause of
    // the listening thread on a busy machine drops SYNs and a client's connect waits 1 s for
    // its retry; listen(2) again only resizes the kernel's queue of unaccepted connections.
    this->new_task_queue = [this] {
      ::listen(this->svr_sock_, kListenBacklog);
      return new run_at_once(*this);
    };
  }
  ~gated_http_server() override { stop_workers(); }

 private:
  static constexpr int kListenBacklog = 128;

  // httplib's task queue, as this server uses it: each job runs at once on the listening
  // thread (it ends in process_and_close_socket below, which only admits or refuses). The
  // listening loop's end shuts the workers down (after their connections end) only when stop()
  // ended it: stop() leaves svr_sock_ invalid, while an accept() error ends the loop with the
  // old descriptor there, and the owner listens again (http_console::listen_until_stopped)
  // with the admitted connections still served.
  class run_at_once final : public httplib::TaskQueue {
   public:
    explicit run_at_once(gated_http_server& server) : server_(server) {}
    void enqueue(std::function<void()> fn) override { fn(); }
    void shutdown() override {
      if (server_.svr_sock_ == INVALID_SOCKET) server_.stop_workers();
    }

   private:
    gated_http_server& server_;
  };

  bool process_and_close_socket(int sock) override {
    std::string peer = socket_peer_ip(sock);
    if (gate_.admit(peer) != peer_connection_limit::verdict::admitted) {
      close_with_reset(sock);
      return false;
    }
    pool_->enqueue([this, sock, peer = std::move(peer)] {
      serve_connection(static_cast<Base*>(this), sock);
      gate_.release(peer);
    });
    return true;
  }

  // Once: httplib's ThreadPool joins its threads on shutdown and cannot be shut down twice.
  void stop_workers() {
    std::call_once(workers_stopped_, [this] { pool_->shutdown(); });
  }

  peer_connection_limit& gate_;
  std::unique_ptr<httplib::ThreadPool> pool_;
  std::once_flag workers_stopped_;
};

}  // namespace moerl::console
