// zmq/connection_limit.h says what this does and why it is safe.
#include "zmq/connection_limit.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <unordered_map>

#include "common/log.h"
#include "common/peer_connection_limit.h"
#include "common/rate_limited_log.h"
#include "common/socket_peer.h"
#include "zmq/check.h"

namespace moerl::zmq {

namespace {

std::atomic<int64_t> g_max_connections_per_peer{0};

constexpr int kEvents = ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_MONITOR_STOPPED;

// One monitor event (libzmq's version 1 format: a frame of u16 event and u32 value, then one
// with the endpoint; for accepted and disconnected connections the value is the descriptor and
// the endpoint the connection's local address, "tcp://IP:PORT").
struct monitor_event {
  uint16_t event = 0;
  int fd = -1;
  std::string endpoint;
};

// The next queued event of `reader`, if any; false also when the context is being terminated.
bool next_event(void* reader, monitor_event& ev) {
  zmq_msg_t head, addr;
  zmq_msg_init(&head);
  if (zmq_msg_recv(&head, reader, ZMQ_DONTWAIT) == -1) {
    zmq_msg_close(&head);
    return false;
  }
  bool ok = zmq_msg_size(&head) == 6 && zmq_msg_more(&head);
  if (ok) {
    uint32_t value = 0;
    std::memcpy(&ev.event, zmq_msg_data(&head), 2);
    std::memcpy(&value, static_cast<const char*>(zmq_msg_data(&head)) + 2, 4);
    ev.fd = static_cast<int>(value);
  }
  zmq_msg_close(&head);
  zmq_msg_init(&addr);
  if (zmq_msg_recv(&addr, reader, ZMQ_DONTWAIT) != -1)
    ev.endpoint.assign(static_cast<const char*>(zmq_msg_data(&addr)), zmq_msg_size(&addr));
  else
    ok = false;
  zmq_msg_close(&addr);
  return ok;
}

// The port of "tcp://HOST:PORT" (0 for anything else).
int endpoint_port(const std::string& endpoint) {
  if (endpoint.rfind("tcp://", 0) != 0) return 0;
  const size_t colon = endpoint.rfind(':');
  return colon == std::string::npos ? 0 : std::atoi(endpoint.c_str() + colon + 1);
}

// Whether `fd` is a connected (not listening) TCP socket whose local port is `port`: a
// connection the listener on that port accepted.
bool is_connection_on_port(int fd, int port) {
  int listening = 0, type = 0;
  socklen_t len = sizeof(int);
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || listening) return false;
  len = sizeof(int);
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) return false;
  sockaddr_storage sa{};
  socklen_t sa_len = sizeof(sa);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &sa_len) != 0) return false;
  if (sa.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in&>(sa).sin_port) == port;
  if (sa.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6&>(sa).sin6_port) == port;
  return false;
}

// One watched server socket: its monitor's reader and the connections it holds open.
struct listener {
  listener(void* r, int64_t max_per_peer) : reader(r), open(0, max_per_peer) {}
  void* reader;
  peer_connection_limit open;
  std::unordered_map<int, std::string> peer_of_fd;  // admitted connections, until they end
};

}  // namespace

void set_max_connections_per_peer(int64_t n) { g_max_connections_per_peer = n; }
int64_t max_connections_per_peer() { return g_max_connections_per_peer; }

struct connection_limiter::shared {
  std::mutex mu;
  std::vector<std::unique_ptr<listener>> added;  // watch() -> the thread
  int wake = -1;                                 // eventfd: something was added, or stop
  std::atomic<bool> stop{false};  // the context is terminated (its sockets are all closed)
};

namespace {

// Applies one batch of `l`'s events (everything its monitor had queued).
void apply(listener& l, std::vector<monitor_event>& batch, std::atomic<uint64_t>& refused,
           rate_limited_log& log) {
  for (size_t i = 0; i < batch.size(); ++i) {
    monitor_event& ev = batch[i];
    if (ev.event == ZMQ_EVENT_ACCEPTED) {
      // Gone already (its disconnect is queued behind it): the descriptor may name something
      // else by now, so it is not touched, and its disconnect is not applied either.
      bool gone = false;
      for (size_t j = i + 1; j < batch.size() && !gone; ++j)
        if (batch[j].event == ZMQ_EVENT_DISCONNECTED && batch[j].fd == ev.fd) {
          batch[j].event = 0;
          gone = true;
        }
      if (gone) continue;
      const int mine = ::fcntl(ev.fd, F_DUPFD_CLOEXEC, 0);
      if (mine < 0) continue;  // closed since: its disconnect finds no entry
      if (is_connection_on_port(mine, endpoint_port(ev.endpoint))) {
        std::string peer = socket_peer_ip(mine);
        if (l.open.admit(peer) == peer_connection_limit::verdict::admitted) {
          l.peer_of_fd[ev.fd] = std::move(peer);
        } else {
          ++refused;                    // before the peer can see the end
          ::shutdown(mine, SHUT_RDWR);  // libzmq reads the end, disconnects and closes its fd
          log.note("its address holds node.zmq_max_connections_per_peer already",
                   "from " + peer + " to " + ev.endpoint);
        }
      }
      ::close(mine);
    } else if (ev.event == ZMQ_EVENT_DISCONNECTED) {
      auto it = l.peer_of_fd.find(ev.fd);
      if (it == l.peer_of_fd.end()) continue;  // refused, or not counted
      l.open.release(it->second);
      l.peer_of_fd.erase(it);
    }
  }
}

// The thread: reads every watched socket's monitor until the context is terminated. It must
// not end before: libzmq blocks the thread that reports an event to a monitor nobody reads.
void serve_readers(const std::shared_ptr<connection_limiter::shared>& sh,
                   const std::shared_ptr<std::atomic<uint64_t>>& refused) {
  rate_limited_log log("ZeroMQ planes: refused a connection",
                       [](const std::string& line) { logger("zmq")->warn("{}", line); });
  std::vector<std::unique_ptr<listener>> watched;
  std::vector<monitor_event> batch;
  for (;;) {
    std::vector<zmq_pollitem_t> items{{nullptr, sh->wake, ZMQ_POLLIN, 0}};
    for (auto& l : watched) items.push_back({l->reader, 0, ZMQ_POLLIN, 0});
    if (zmq_poll(items.data(), static_cast<int>(items.size()), -1) < 0) {
      if (zmq_errno() == ETERM) break;  // zmq_ctx_term: close the readers so it can finish
      logger("zmq")->error("connection limit: zmq_poll: {}", zmq_strerror(zmq_errno()));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // EINTR and the like
      continue;
    }
    if (items[0].revents & ZMQ_POLLIN) {
      uint64_t n = 0;
      if (::read(sh->wake, &n, sizeof n) < 0) {}  // EAGAIN: another wake-up took it
      if (sh->stop) break;                        // with no socket left to poll, ETERM never comes
      std::lock_guard<std::mutex> lock(sh->mu);
      for (auto& l : sh->added) watched.push_back(std::move(l));
      sh->added.clear();
    }
    for (size_t i = 1; i < items.size(); ++i) {  // watched only grew at its end
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      listener& l = *watched[i - 1];
      batch.clear();
      for (monitor_event ev; next_event(l.reader, ev); ev = monitor_event{}) batch.push_back(ev);
      apply(l, batch, *refused, log);
      for (const auto& ev : batch)
        if (ev.event == ZMQ_EVENT_MONITOR_STOPPED) {  // the socket is closed: its last event
          zmq_close(l.reader);
          l.reader = nullptr;
          break;
        }
    }
    watched.erase(std::remove_if(watched.begin(), watched.end(),
                                 [](const auto& l) { return l->reader == nullptr; }),
                  watched.end());
  }
  for (auto& l : watched) zmq_close(l->reader);
  std::lock_guard<std::mutex> lock(sh->mu);
  for (auto& l : sh->added) zmq_close(l->reader);
  sh->added.clear();
}

}  // namespace

connection_limiter::connection_limiter(void* ctx) : ctx_(ctx), shared_(std::make_shared<shared>()) {
  shared_->wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  thread_ = std::thread([sh = shared_, refused = refused_] { serve_readers(sh, refused); });
}

connection_limiter::~connection_limiter() {
  shared_->stop = true;
  const uint64_t one = 1;
  if (shared_->wake >= 0 && ::write(shared_->wake, &one, sizeof one) < 0) {}
  if (thread_.joinable()) thread_.join();
  if (shared_->wake >= 0) ::close(shared_->wake);
}

status connection_limiter::watch(void* sock, int64_t max_per_peer) {
  if (shared_->wake < 0)
    return error(errc::io_error,
                 std::string("eventfd for the ZeroMQ connection limit: ") + std::strerror(errno));
  const std::string endpoint =
      "inproc://moerl.connection-limit." + std::to_string(num_watched_.fetch_add(1));
  // The reader connects first (inproc allows it before the bind): a monitor must never exist
  // without its reader, since libzmq blocks the thread that reports an event (the I/O thread
  // for an accept, the reaper for the socket's end) while no reader is connected.
  void* reader = zmq_socket(ctx_, ZMQ_PAIR);
  if (!reader) return detail::zmq_failure("zmq_socket(PAIR)", zmq_errno(), __FILE__, __LINE__);
  if (zmq_connect(reader, endpoint.c_str()) != 0 ||
      zmq_socket_monitor(sock, endpoint.c_str(), kEvents) != 0) {
    const int e = zmq_errno();
    zmq_close(reader);
    return detail::zmq_failure("zmq_socket_monitor (connection limit)", e, __FILE__, __LINE__);
  }
  {
    std::lock_guard<std::mutex> lock(shared_->mu);  // hands the reader to the thread
    shared_->added.push_back(std::make_unique<listener>(reader, max_per_peer));
  }
  const uint64_t one = 1;
  if (::write(shared_->wake, &one, sizeof one) < 0) {}  // a full counter wakes it already
  return ok_status();
}

}  // namespace moerl::zmq
