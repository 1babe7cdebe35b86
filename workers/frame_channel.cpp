#include "workers/frame_channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace moerl::workers {
namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Waits for `events` on fd until deadline_ms (steady clock). False on timeout.
bool wait_for(int fd, short events, int64_t deadline_ms) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int64_t left = deadline_ms - now_ms();
    const int r = ::poll(&p, 1, static_cast<int>(left < 0 ? 0 : left));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return true;  // let the read/write report the error
  }
}

}  // namespace

frame_channel::frame_channel(int fd) : fd_(fd) {}

frame_channel::~frame_channel() { close_fd(); }

void frame_channel::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

status frame_channel::send(const nlohmann::json& msg, int64_t timeout_ms) {
  if (fd_ < 0) return error(errc::peer_dead, "worker channel is closed");
  const std::string body = msg.dump();
  if (body.size() > kMaxFrameBytes)
    return error(errc::message_too_large, "frame of " + std::to_string(body.size()) +
                                              " bytes is over the limit of " +
                                              std::to_string(kMaxFrameBytes));
  std::string frame(4, '\0');
  const auto n = static_cast<uint32_t>(body.size());
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  frame += body;
  const int64_t deadline = now_ms() + timeout_ms;
  size_t off = 0;
  while (off < frame.size()) {
    // MSG_NOSIGNAL: a worker that died must be an error here, not a SIGPIPE for the node.
    const ssize_t w =
        ::send(fd_, frame.data() + off, frame.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      off += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(fd_, POLLOUT, deadline))
        return error(errc::timeout,
                     "worker did not read a frame within " + std::to_string(timeout_ms) + " ms");
      continue;
    }
    const std::string why = w < 0 ? std::strerror(errno) : "closed";
    close_fd();
    return error(errc::peer_dead, "worker channel: send: " + why);
  }
  return {};
}

result<std::optional<nlohmann::json>> frame_channel::receive(int64_t timeout_ms) {
  const int64_t deadline = now_ms() + timeout_ms;
  for (;;) {
    if (in_.size() >= 4) {
      uint32_t n = 0;
      for (int i = 0; i < 4; ++i)
        n |= static_cast<uint32_t>(static_cast<uint8_t>(in_[i])) << (8 * i);
      if (n > kMaxFrameBytes) {
        close_fd();
        return error(errc::message_too_large, "worker frame of " + std::to_string(n) +
                                                  " bytes is over the limit of " +
                                                  std::to_string(kMaxFrameBytes));
      }
      if (in_.size() >= 4 + size_t{n}) {
        std::string body = in_.substr(4, n);
        in_.erase(0, 4 + size_t{n});
        auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
        if (j.is_discarded() || !j.is_object())
          return error(errc::malformed_message, "worker frame is not a JSON object");
        return std::optional<nlohmann::json>(std::move(j));
      }
    }
    if (fd_ < 0) return error(errc::peer_dead, "worker channel is closed");
    if (!wait_for(fd_, POLLIN, deadline)) return std::optional<nlohmann::json>();
    char buf[65536];
    const ssize_t r = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    if (r > 0) {
      in_.append(buf, static_cast<size_t>(r));
      continue;
    }
    if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (now_ms() >= deadline) return std::optional<nlohmann::json>();
      continue;
    }
    const std::string why = r < 0 ? std::strerror(errno) : "the worker closed it";
    close_fd();
    return error(errc::peer_dead, "worker channel: " + why);
  }
}

}  // namespace moerl::workers
