// One end of the local worker protocol's byte stream (workers/PROTOCOL.md): frames of a
// 4-byte little-endian length followed by that many bytes of one JSON object. Not thread-safe:
// one thread owns a channel.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace moerl::workers {

// Larger frames are refused (message_too_large) and the channel is closed: a peer that sent
// one cannot be re-synchronised. A rollout lease of a few prompt groups is a few KiB.
constexpr uint32_t kMaxFrameBytes = 16u << 20;

class frame_channel {
 public:
  explicit frame_channel(int fd);  // owns fd (closed by the destructor)
  ~frame_channel();
  frame_channel(const frame_channel&) = delete;
  frame_channel& operator=(const frame_channel&) = delete;

  // Writes one whole frame (blocking up to timeout_ms). peer_dead once the peer closed.
  status send(const nlohmann::json& msg, int64_t timeout_ms);
  // One whole frame, waiting at most timeout_ms (0: only what is already there). nullopt on
  // timeout (a partial frame is kept for the next call). peer_dead on EOF; malformed_message
  // when the frame is not a JSON object (the frame is consumed, the channel stays usable);
  // message_too_large when its length is over kMaxFrameBytes (the channel is closed).
  result<std::optional<nlohmann::json>> receive(int64_t timeout_ms);
  bool closed() const { return fd_ < 0; }
  // Closes this end: the peer reads end-of-stream (a worker's SDK then returns and exits).
  void close() { close_fd(); }
  int fd() const { return fd_; }

 private:
  void close_fd();
  int fd_ = -1;
  std::string in_;  // bytes read and not yet consumed as frames
};

}  // namespace moerl::workers
