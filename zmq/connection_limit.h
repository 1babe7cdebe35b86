// node.zmq_max_connections_per_peer: the connections one peer address may hold open at once on
// any ZeroMQ server socket of this process (samples, reward hop, env, weight caches, admin
// console). libzmq has no such option, so each server socket is watched by a socket monitor
// (zmq_socket_monitor): ZMQ_EVENT_ACCEPTED names the new connection's descriptor, from which
// the peer's address is read (getpeername); a connection that would take its address over the
// bound is shut down (shutdown(2) on a duplicate of the descriptor, so libzmq sees an ordinary
// disconnect and closes its own descriptor) and counted; ZMQ_EVENT_DISCONNECTED gives a slot
// back. One mechanism for plain and CURVE planes alike, and it reaches connections that never
// start a handshake (which CURVE's ZAP handler never sees).
//
// Why a duplicate and a check. The monitor's events arrive a little after libzmq acted, so by
// then the descriptor may have been closed and its number reused by anything in the process.
// Events are read in batches and an accepted connection whose disconnect is in the same batch
// is left alone; otherwise the duplicate (which pins whatever the number now names) is shut
// down only if it is a connected TCP socket on the port the event names, that is a connection
// of this same listener, never another subsystem's socket. Assumes the context's one I/O
// thread (libzmq's default, which zmq_context keeps), so a connection's accept event precedes
// its disconnect event.
//
// One per process, like node.max_frame_bytes (zmq/frame_limit.h): make_plane_context and the
// coordinator set it from the config; 0 (the value until then) watches nothing.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/error.h"

namespace moerl::zmq {

void set_max_connections_per_peer(int64_t n);
int64_t max_connections_per_peer();

// The watcher of one context's server sockets: one thread reads every socket's monitor.
// Threading: watch() is called by the thread that owns the socket, before it binds; the counts
// are safe to read from any thread.
class connection_limiter {
 public:
  explicit connection_limiter(void* ctx);
  // Destroy it after zmq_ctx_term: its thread reads the monitors for as long as any socket
  // lives, and closes its own sockets when the termination wakes it (ETERM), so that the
  // termination can finish; this then ends the thread.
  ~connection_limiter();
  connection_limiter(const connection_limiter&) = delete;
  connection_limiter& operator=(const connection_limiter&) = delete;

  // Bounds the connections each peer address holds on `sock` to `max_per_peer` from now on.
  status watch(void* sock, int64_t max_per_peer);
  // Connections shut down because their address already held its bound.
  uint64_t num_refused() const { return refused_->load(); }

  struct shared;  // what watch() hands the thread (internal to connection_limit.cpp)

 private:
  void* ctx_;
  std::shared_ptr<std::atomic<uint64_t>> refused_ = std::make_shared<std::atomic<uint64_t>>(0);
  std::shared_ptr<shared> shared_;
  std::atomic<uint64_t> num_watched_{0};
  std::thread thread_;
};

}  // namespace moerl::zmq
