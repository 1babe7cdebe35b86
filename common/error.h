// moerl's error vocabulary. Expected failures are values (moerl::result<T>), never
// exceptions steering control flow. The code enum travels in messages: the Cap'n Proto
// schema messages/error.capnp mirrors it value for value (checked by a test).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>

namespace moerl {

// One documented line per code. Values are part of the wire format: never renumber.
enum class errc : uint16_t {
  ok = 0,                 // no error
  invalid_argument = 1,   // a caller passed a value outside the documented domain
  invalid_config = 2,     // a config file or override is malformed, unknown or out of range
  malformed_message = 3,  // bytes from the network did not decode as the expected message
  message_too_large = 4,  // a message exceeded the configured maximum size
  truncated_message = 5,  // a message ended before its declared length
  unknown_command = 6,    // an admin/console command is not known
  unknown_node = 7,       // a node id named in a request does not exist
  unauthorized = 8,       // an admin request carried a wrong or missing token
  timeout = 9,            // an operation did not finish inside its deadline
  peer_dead = 10,         // a peer process died or stopped progressing
  stale_attempt = 11,     // a sample or report carried a fenced-off (old) lease attempt
  duplicate = 12,         // a sample with an already-accepted (unit, attempt, seq) arrived again
  stale_policy = 13,      // a sample's policy version is older than max_staleness allows
  not_found = 14,         // a requested object, unit or key does not exist
  io_error = 15,          // a file, socket or object-store operation failed
  fabric_error = 16,      // a libfabric call failed (message names the call)
  provider_unavailable = 17,  // a required fabric provider is absent on this host
  cuda_error = 18,            // a CUDA/NCCL call failed
  capacity_exceeded = 19,     // a bounded queue/buffer is full; retry after credit returns
  shutting_down = 20,         // the node is draining or exiting and refuses new work
  internal = 21,              // an invariant broke inside moerl (a bug); message says which
};

// Stable lower-case name of a code, e.g. "malformed_message".
const char* errc_name(errc code);

struct error {
  errc code = errc::ok;
  std::string message;  // names what was wrong: the field, key, peer or call

  error() = default;
  error(errc c, std::string m) : code(c), message(std::move(m)) {}
  std::string to_string() const;  // "malformed_message: <message>"
};

// A value or an error. Small on purpose; replace with std::expected once on C++23.
template <class T>
class result {
 public:
  result(T value) : v_(std::move(value)) {}
  result(error err) : v_(std::move(err)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }
  const T& operator*() const { return value(); }

  const error& err() const { return std::get<1>(v_); }

 private:
  std::variant<T, error> v_;
};

// result<void>
template <>
class result<void> {
 public:
  result() = default;
  result(error err) : err_(std::move(err)), ok_(false) {}
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const error& err() const { return err_; }

 private:
  error err_;
  bool ok_ = true;
};

using status = result<void>;

inline status ok_status() { return {}; }

}  // namespace moerl
