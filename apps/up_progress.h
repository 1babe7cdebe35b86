// `moerl up`'s progress display. On a terminal: one line redrawn in place (iteration N/M with
// a bar, reward, samples/s, lost/dup, ETA), with the job's event lines (interruptions,
// replacements) printed above it. Otherwise (a pipe, a log file): the same line as a line of
// its own whenever the iteration advances or the accounting's safety figures change, and at
// least every few seconds while nothing does, so a log has a line per iteration and no more.
// On a terminal this process's stderr (its log lines) is passed through a pipe for as long as
// the display lives, so a log line too goes above the progress line instead of into it.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

namespace moerl::apps {

// What one progress line shows.
struct progress_figures {
  uint64_t iteration = 0, iterations = 0;
  bool has_reward = false;
  double reward = 0, reward_random = 0, reward_max = 1;
  double samples_per_s = 0;
  uint64_t lost = 0, duplicated = 0;
  bool invariant_ok = true;
  double eta_s = -1;  // < 0: not known yet
};

// The line for `f`, at most `width` characters when width > 0 (a terminal's columns).
std::string progress_line(const progress_figures& f, size_t width);

class up_progress {
 public:
  // `tty`: redraw in place. `heartbeat`: the longest a log goes without a line.
  up_progress(std::FILE* out, bool tty, std::chrono::milliseconds heartbeat);
  ~up_progress();  // finish()
  up_progress(const up_progress&) = delete;
  up_progress& operator=(const up_progress&) = delete;
  // The coordinator's status and the trainer's job figures, at every poll of the job.
  void update(const nlohmann::json& status, const nlohmann::json& job_stats);
  // The run's report once settled: at "done" the trainer may still have been stepping on the
  // last groups, so the last poll's iteration can lag; the line ends on the report's figures.
  void settled(const nlohmann::json& report);
  // An event line ("moerl up: >>> ..."): above the progress line on a terminal.
  void message(const std::string& line);
  // Ends the in-place line (the last figures stay on screen) and gives stderr back.
  void finish();
  // The figures of the last line drawn (zeros before the first poll).
  progress_figures last() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_;
  }

 private:
  using clock = std::chrono::steady_clock;
  void draw(const std::string& line);
  void capture_stderr();
  void pass_stderr_lines();  // the capture's thread: each line as a message()

  mutable std::mutex mu_;  // the screen: the poll's updates and the stderr lines
  std::FILE* out_;
  bool tty_;
  std::chrono::milliseconds heartbeat_;
  std::string shown_;  // the in-place line on screen ("" when none)
  clock::time_point last_line_at_{};
  progress_figures last_{};
  bool printed_any_ = false;
  // (when, samples trained) over the last few seconds: samples/s; (when, iteration) from the
  // first poll: the ETA.
  std::deque<std::pair<clock::time_point, uint64_t>> trained_;
  uint64_t start_iteration_ = 0;
  std::pair<clock::time_point, uint64_t> first_iteration_{};
  bool have_first_ = false;
  int saved_stderr_ = -1, capture_read_ = -1;  // while stderr is captured
  std::thread capture_;
};

}  // namespace moerl::apps
