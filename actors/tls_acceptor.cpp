// tls_acceptor.h says what this replaces in caf_openssl and why.
#include "actors/tls_acceptor.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <memory>
#include <set>
#include <thread>
#include <unordered_map>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/doorman.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <caf/io/network/stream_impl.hpp>
#include <caf/io/scribe.hpp>

#include "actors/internal/control_priority.h"
#include "common/socket_peer.h"

namespace moerl::actors {

namespace {

using caf::io::network::default_multiplexer;
using caf::io::network::native_socket;
using caf::io::network::rw_state;
using steady = std::chrono::steady_clock;

struct accept_counters {
  std::atomic<uint64_t> accepted{0}, too_many_pending{0}, too_many_from_peer{0},
      handshake_timeout{0}, handshake_failed{0}, fd_limit{0};
};

accept_counters& counters() {
  static accept_counters c;
  return c;
}

// OpenSSL writes to sockets with write(2): a peer that reset its connection would raise
// SIGPIPE, whose default action ends the node. Blocked around each call on the multiplexer
// thread (as caf_openssl does), and any SIGPIPE the call raised is taken before unblocking.
class sigpipe_blocked {
 public:
  sigpipe_blocked() {
    sigemptyset(&mask_);
    sigaddset(&mask_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &mask_, &saved_);
  }
  ~sigpipe_blocked() {
    timespec zero{};
    while (sigtimedwait(&mask_, nullptr, &zero) > 0) {}
    pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
  }
  sigpipe_blocked(const sigpipe_blocked&) = delete;
  sigpipe_blocked& operator=(const sigpipe_blocked&) = delete;

 private:
  sigset_t mask_{}, saved_{};
};

// An established TLS session as CAF's stream policy (read_some/write_some/must_read_more).
// The handshake is over before a session gets here, so unlike caf_openssl's policy it never
// calls SSL_accept on the multiplexer thread. SSL_read/SSL_write resolve to the error-queue
// guard (openssl_error_queue.cpp), which empties this thread's queue first.
class tls_policy {
 public:
  explicit tls_policy(SSL* ssl) : ssl_(ssl) {}
  ~tls_policy() { SSL_free(ssl_); }
  tls_policy(const tls_policy&) = delete;
  tls_policy& operator=(const tls_policy&) = delete;

  rw_state read_some(size_t& result, native_socket, void* buf, size_t len) {
    sigpipe_blocked guard;
    return settle(SSL_read(ssl_, buf, clamp(len)), result);
  }
  rw_state write_some(size_t& result, native_socket, const void* buf, size_t len) {
    result = 0;
    if (len == 0) return rw_state::indeterminate;
    sigpipe_blocked guard;
    return settle(SSL_write(ssl_, buf, clamp(len)), result);
  }
  bool must_read_more(native_socket, size_t threshold) {
    return static_cast<size_t>(SSL_pending(ssl_)) >= threshold;
  }

 private:
  static int clamp(size_t len) { return static_cast<int>(std::min<size_t>(len, INT_MAX)); }
  rw_state settle(int ret, size_t& result) {
    result = 0;
    if (ret > 0) {
      result = static_cast<size_t>(ret);
      return rw_state::success;
    }
    switch (SSL_get_error(ssl_, ret)) {
      case SSL_ERROR_WANT_READ:
      case SSL_ERROR_WANT_WRITE:
        return rw_state::success;  // nothing moved; the multiplexer polls again
      default: ERR_clear_error(); return rw_state::failure;
    }
  }
  SSL* ssl_;
};

// One accepted, handshaken connection as a CAF scribe (what the BASP broker reads and
// writes); it owns the socket and the session.
class tls_scribe final : public caf::io::scribe {
 public:
  tls_scribe(default_multiplexer& mpx, native_socket fd, SSL* ssl)
      : scribe(caf::io::network::conn_hdl_from_socket(fd)), stream_(mpx, fd, ssl) {}

  void configure_read(caf::io::receive_policy::config config) override {
    stream_.configure_read(config);
    if (!launched_) {
      launched_ = true;
      stream_.start(this);
    }
  }
  void ack_writes(bool enable) override { stream_.ack_writes(enable); }
  std::vector<char>& wr_buf() override { return stream_.wr_buf(); }
  std::vector<char>& rd_buf() override { return stream_.rd_buf(); }
  void graceful_shutdown() override {
    stream_.graceful_shutdown();
    detach(&stream_.backend(), false);
  }
  void flush() override { stream_.flush(this); }
  std::string addr() const override {
    auto x = caf::io::network::remote_addr_of_fd(stream_.fd());
    return x ? *x : std::string();
  }
  uint16_t port() const override {
    auto x = caf::io::network::remote_port_of_fd(stream_.fd());
    return x ? *x : 0;
  }
  void add_to_loop() override { stream_.activate(this); }
  void remove_from_loop() override { stream_.passivate(); }

 private:
  bool launched_ = false;
  caf::io::network::stream_impl<tls_policy> stream_;
};

// The published port as a CAF doorman. The multiplexer never polls the listening socket:
// this object's own thread accepts and handshakes, and only hands finished sessions over.
class tls_doorman final : public caf::io::doorman {
 public:
  tls_doorman(default_multiplexer& mpx, native_socket listen_fd, SSL_CTX* ctx,
              const tls_accept_limits& limits)
      : doorman(caf::io::network::accept_hdl_from_socket(listen_fd)),
        mpx_(mpx),
        listen_fd_(listen_fd),
        ctx_(ctx),
        limits_(limits) {}

  ~tls_doorman() override {
    stop();
    ::close(listen_fd_);
    SSL_CTX_free(ctx_);
  }

  void launch() override {
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    thread_ = std::thread([this] { run(); });
  }
  // Accepting goes on while the broker is passive: pending handshakes are bounded here, and a
  // finished one is a connection the broker takes like any other.
  bool new_connection() override { return false; }
  void add_to_loop() override {}
  void remove_from_loop() override {}
  void graceful_shutdown() override {
    stop();
    detach(&mpx_, false);
  }
  std::string addr() const override {
    auto x = caf::io::network::local_addr_of_fd(listen_fd_);
    return x ? *x : std::string();
  }
  uint16_t port() const override {
    auto x = caf::io::network::local_port_of_fd(listen_fd_);
    return x ? *x : 0;
  }

 private:
  struct pending {
    SSL* ssl;
    std::string peer;
    steady::time_point deadline;
  };

  void stop() {
    if (!thread_.joinable()) return;
    stopping_ = true;
    uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof(one));
    thread_.join();
    ::close(wake_fd_);
  }

  // Multiplexer thread: a finished handshake becomes the broker's connection.
  void adopt(native_socket fd, SSL* ssl) {
    if (detached()) {
      SSL_free(ssl);
      close_with_reset(fd);
      return;
    }
    auto scribe = caf::make_counted<tls_scribe>(mpx_, fd, ssl);
    auto hdl = scribe->hdl();
    parent()->add_scribe(std::move(scribe));
    doorman::new_connection(&mpx_, hdl);
  }

  // Handshakes pending from which on the thread yields to the node's own threads (nice 10), so
  // that a storm costs heartbeats and leases no CPU they need, and down to which it runs at the
  // control threads' priority again. Always at nice 10 (before 6 Dec), a node's joins starved
  // whenever the host was busy: beside 8 nodes connecting at once on a loaded 2-core VM, the
  // handshakes timed out faster than the thread got to them, the retries piled up to the
  // per-peer bound, and no node joined in 50 s (actors_cluster_tls_test).
  static constexpr size_t kStormPending = 32, kCalmPending = 8;

  // Raising a thread's priority again needs CAP_SYS_NICE: without it the thread stays at the
  // nice value it has (prioritize_this_thread logs that once).
  void set_yielding(bool yielding) {
    if (yielding == yielding_) return;
    yielding_ = yielding;
    const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
    if (yielding)
      ::setpriority(PRIO_PROCESS, tid, 10);
    else if (limits_.calm_nice == 0 || !prioritize_this_thread(limits_.calm_nice))
      ::setpriority(PRIO_PROCESS, tid, 0);
  }

  void run() {
    // This thread handles what strangers send: at the control threads' priority while few
    // handshakes are pending, below every other thread in a storm (kStormPending).
    prioritize_this_thread(limits_.calm_nice);
    sigset_t pipe_mask;
    sigemptyset(&pipe_mask);
    sigaddset(&pipe_mask, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_mask, nullptr);        // for good on this thread
    pthread_setname_np(pthread_self(), "moerl.tlsaccept");  // 15 characters at most
    ep_ = ::epoll_create1(EPOLL_CLOEXEC);
    watch(wake_fd_, EPOLLIN, EPOLL_CTL_ADD);
    watch(listen_fd_, EPOLLIN, EPOLL_CTL_ADD);
    bool listening = true;
    steady::time_point resume_accepting{};
    epoll_event events[128];
    while (!stopping_) {
      auto now = steady::now();
      auto next = now + std::chrono::milliseconds(200);
      for (auto& [fd, p] : pending_) next = std::min(next, p.deadline);
      if (!listening) next = std::min(next, resume_accepting);
      auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
      int n = ::epoll_wait(ep_, events, 128, static_cast<int>(std::max<int64_t>(0, wait_ms) + 1));
      for (int i = 0; i < n; ++i) {
        int fd = events[i].data.fd;
        if (fd == wake_fd_) continue;
        if (fd == listen_fd_) {
          if (!accept_all()) {  // out of file descriptors: pause rather than spin
            watch(listen_fd_, 0, EPOLL_CTL_DEL);
            listening = false;
            resume_accepting = steady::now() + std::chrono::milliseconds(100);
          }
          continue;
        }
        step(fd);
      }
      if (pending_.size() >= kStormPending) set_yielding(true);
      if (pending_.size() <= kCalmPending) set_yielding(false);
      now = steady::now();
      for (auto it = pending_.begin(); it != pending_.end();) {
        auto cur = it++;
        if (cur->second.deadline <= now) {
          ++counters().handshake_timeout;
          drop(cur->first);
        }
      }
      if (!listening && now >= resume_accepting) {
        watch(listen_fd_, EPOLLIN, EPOLL_CTL_ADD);
        listening = true;
      }
    }
    while (!pending_.empty()) drop(pending_.begin()->first);
    ::close(ep_);
  }

  void watch(int fd, uint32_t what, int op) {
    epoll_event ev{};
    ev.events = what;
    ev.data.fd = fd;
    ::epoll_ctl(ep_, op, fd, &ev);
  }

  // Accepts what the backlog holds; false when the process is out of file descriptors.
  bool accept_all() {
    for (;;) {
      sockaddr_storage sa{};
      socklen_t len = sizeof(sa);
      int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          ++counters().fd_limit;
          return false;
        }
        return true;  // EAGAIN: the backlog is empty
      }
      std::string peer = peer_ip(sa);
      if (static_cast<int64_t>(pending_.size()) >= limits_.max_pending) {
        ++counters().too_many_pending;
        close_with_reset(fd);
        continue;
      }
      if (per_peer_[peer] >= limits_.max_pending_per_peer) {
        ++counters().too_many_from_peer;
        close_with_reset(fd);
        continue;
      }
      SSL* ssl = SSL_new(ctx_);
      if (ssl == nullptr || SSL_set_fd(ssl, fd) != 1) {
        SSL_free(ssl);
        ++counters().handshake_failed;
        close_with_reset(fd);
        continue;
      }
      SSL_set_accept_state(ssl);
      ++per_peer_[peer];
      pending_.emplace(
          fd, pending{ssl, std::move(peer),
                      steady::now() + std::chrono::milliseconds(limits_.handshake_timeout_ms)});
      watch(fd, EPOLLIN, EPOLL_CTL_ADD);
      step(fd);
    }
  }

  // Advances one handshake as far as the bytes at hand allow.
  void step(int fd) {
    auto it = pending_.find(fd);
    if (it == pending_.end()) return;
    SSL* ssl = it->second.ssl;
    int ret = SSL_accept(ssl);  // the guarded one: empties the error queue first
    if (ret == 1) {
      forget(fd);
      ++counters().accepted;
      caf::intrusive_ptr<tls_doorman> self{this};
      mpx_.post([self, fd, ssl] { self->adopt(fd, ssl); });
      return;
    }
    switch (SSL_get_error(ssl, ret)) {
      case SSL_ERROR_WANT_READ: watch(fd, EPOLLIN, EPOLL_CTL_MOD); return;
      case SSL_ERROR_WANT_WRITE: watch(fd, EPOLLOUT, EPOLL_CTL_MOD); return;
      default:  // garbage, no certificate, one our CA did not sign, a close mid-handshake
        ERR_clear_error();
        ++counters().handshake_failed;
        drop(fd);
    }
  }

  // Stops tracking a handshake (the fd and session now belong elsewhere).
  void forget(int fd) {
    auto it = pending_.find(fd);
    watch(fd, 0, EPOLL_CTL_DEL);
    if (--per_peer_[it->second.peer] <= 0) per_peer_.erase(it->second.peer);
    pending_.erase(it);
  }

  void drop(int fd) {
    SSL* ssl = pending_.at(fd).ssl;
    forget(fd);
    SSL_free(ssl);
    close_with_reset(fd);
  }

  default_multiplexer& mpx_;
  native_socket listen_fd_;
  SSL_CTX* ctx_;
  tls_accept_limits limits_;
  int wake_fd_ = -1, ep_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  std::unordered_map<int, pending> pending_;  // the acceptor thread's only
  std::unordered_map<std::string, int64_t> per_peer_;
  bool yielding_ = false;  // at nice 10 for a storm (set_yielding)
};

// One server context for every handshake, with caf_openssl 0.17.6's authenticated settings
// (its session.cpp): the node's certificate and key, peers verified against the cluster CA
// and required to present a certificate, cipher list HIGH:!aNULL:!MD5. caf_openssl built
// a new context, reading the three PEM files, for every accepted connection.
result<SSL_CTX*> server_context(const tls_files& f) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_method());
  if (ctx == nullptr) return error(errc::internal, "TLS: cannot create an OpenSSL context");
  auto fail = [&](const std::string& what) -> result<SSL_CTX*> {
    SSL_CTX_free(ctx);
    unsigned long e = ERR_get_error();
    ERR_clear_error();
    char buf[256] = {0};
    if (e != 0) ERR_error_string_n(e, buf, sizeof(buf));
    return error(errc::invalid_config, "TLS: " + what + (e != 0 ? std::string(": ") + buf : ""));
  };
  if (SSL_CTX_use_certificate_chain_file(ctx, f.certificate.c_str()) != 1)
    return fail("cannot load node.tls_certificate '" + f.certificate + "'");
  if (SSL_CTX_use_PrivateKey_file(ctx, f.key.c_str(), SSL_FILETYPE_PEM) != 1)
    return fail("cannot load node.tls_key '" + f.key + "'");
  if (SSL_CTX_load_verify_locations(ctx, f.ca.c_str(), nullptr) != 1)
    return fail("cannot load node.tls_ca '" + f.ca + "'");
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  if (SSL_CTX_set_cipher_list(ctx, "HIGH:!aNULL:!MD5") != 1) return fail("cannot set ciphers");
  return ctx;
}

}  // namespace

result<uint16_t> publish_tls(caf::actor_system& sys, const caf::actor& a, const std::string& host,
                             uint16_t port, const tls_files& files,
                             const tls_accept_limits& limits) {
  auto ctx = server_context(files);
  if (!ctx) return ctx.err();
  auto fd =
      caf::io::network::new_tcp_acceptor_impl(port, host.empty() ? nullptr : host.c_str(), true);
  if (!fd) {
    SSL_CTX_free(*ctx);
    return error(errc::io_error, "cannot publish on " + host + ":" + std::to_string(port) + ": " +
                                     sys.render(fd.error()));
  }
  ::fcntl(*fd, F_SETFL, ::fcntl(*fd, F_GETFL) | O_NONBLOCK);
  auto& mpx = static_cast<default_multiplexer&>(sys.middleman().backend());
  auto door = caf::make_counted<tls_doorman>(mpx, *fd, *ctx, limits);
  const uint16_t bound = door->port();
  // What caf::openssl::publish does after opening its port: the BASP broker adopts the
  // doorman and serves `a` there (io::middleman_actor_impl::put).
  auto broker = sys.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  caf::anon_send(broker, caf::publish_atom::value, caf::io::doorman_ptr{std::move(door)}, bound,
                 caf::actor_cast<caf::strong_actor_ptr>(a), sys.message_types(a));
  return bound;
}

nlohmann::json tls_accept_counters() {
  auto& c = counters();
  return {{"accepted", c.accepted.load()},
          {"refused",
           {{"too_many_pending", c.too_many_pending.load()},
            {"too_many_from_peer", c.too_many_from_peer.load()},
            {"handshake_timeout", c.handshake_timeout.load()},
            {"handshake_failed", c.handshake_failed.load()},
            {"fd_limit", c.fd_limit.load()}}}};
}

}  // namespace moerl::actors
