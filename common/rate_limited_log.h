// Logging something that can happen at line rate (a peer sending garbage, a flood of refused
// input) without flooding the log: per reason, at most one line per interval, each carrying
// how many more happened since the previous line. Nothing is lost from the count, only from
// the text. Not thread-safe: one owner (as the sample plane's sockets have).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace moerl {

class rate_limited_log {
 public:
  using clock = std::chrono::steady_clock;
  // Receives each line; production code logs it as a warning.
  using sink = std::function<void(const std::string& line)>;

  // `what` starts every line ("shard buffer-0: dropped a frame"). `now` is replaceable so a
  // test can step time instead of sleeping.
  rate_limited_log(std::string what, sink out,
                   std::chrono::milliseconds interval = std::chrono::seconds(1),
                   std::function<clock::time_point()> now = &clock::now);
  // Logs what is still unreported (a count with no line yet), so a burst at the end shows.
  ~rate_limited_log();
  rate_limited_log(const rate_limited_log&) = delete;
  rate_limited_log& operator=(const rate_limited_log&) = delete;

  // One occurrence of `reason` (a short fixed phrase: "not two frames"); `detail` says more
  // about this one and appears only if this occurrence gets a line.
  void note(const std::string& reason, const std::string& detail = "");
  uint64_t num_noted() const { return num_noted_; }

 private:
  struct per_reason {
    clock::time_point last_line{};
    uint64_t unreported = 0;  // noted since the last line, without one of their own
  };
  void emit(const std::string& reason, per_reason& r, const std::string& detail);

  std::string what_;
  sink out_;
  std::chrono::milliseconds interval_;
  std::function<clock::time_point()> now_;
  std::map<std::string, per_reason> reasons_;
  uint64_t num_noted_ = 0;
};

}  // namespace moerl
