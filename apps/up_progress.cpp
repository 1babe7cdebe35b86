#include "apps/up_progress.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace moerl::apps {

using nlohmann::json;

namespace {

constexpr size_t kBarWidth = 20;
constexpr auto kRateWindow = std::chrono::seconds(10);  // samples/s over the last 10 s

std::string duration_text(double s) {
  if (s < 0) return "?";
  const auto total = static_cast<long>(std::lround(s));
  char buf[32];
  if (total >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", total / 3600, total / 60 % 60, total % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", total / 60, total % 60);
  return buf;
}

// The terminal's width, less one column so the line never wraps (a wrapped line cannot be
// redrawn in place); 0 when unknown.
size_t terminal_columns(std::FILE* out) {
  winsize ws{};
  if (::ioctl(::fileno(out), TIOCGWINSZ, &ws) != 0 || ws.ws_col < 2) return 0;
  return static_cast<size_t>(ws.ws_col) - 1;
}

}  // namespace

std::string progress_line(const progress_figures& f, size_t width) {
  // The line's parts, each with the order it is dropped in when the terminal is too narrow
  // (0: never): the reward's bounds first, then the prefix, then a holding invariant.
  struct part {
    std::string text;
    int drop;
  };
  std::vector<part> parts;
  char buf[256];
  parts.push_back({"moerl up: ", 2});
  std::string where =
      "iteration " + std::to_string(f.iteration) + "/" + std::to_string(f.iterations);
  if (f.iterations > 0) {
    const size_t filled =
        std::min(kBarWidth, static_cast<size_t>(f.iteration * kBarWidth / f.iterations));
    where += " [" + std::string(filled, '#') + std::string(kBarWidth - filled, '.') + "]";
  }
  parts.push_back({where, 0});
  if (f.has_reward) {
    std::snprintf(buf, sizeof buf, "  reward %.3f", f.reward);
    parts.push_back({buf, 0});
    std::snprintf(buf, sizeof buf, " (random %.3f, max %.1f)", f.reward_random, f.reward_max);
    parts.push_back({buf, 1});
  } else {
    parts.push_back({"  reward -", 0});
  }
  std::snprintf(buf, sizeof buf, "  samples/s %.0f  lost %lu  dup %lu", f.samples_per_s,
                static_cast<unsigned long>(f.lost), static_cast<unsigned long>(f.duplicated));
  parts.push_back({buf, 0});
  // The ETA with the figures a user reads first; the invariant's "ok" last (it is the
  // first to go on a narrow terminal; a broken one never goes).
  parts.push_back({"  ETA " + duration_text(f.eta_s), 0});
  parts.push_back(
      {f.invariant_ok ? "  invariant ok" : "  invariant BROKEN", f.invariant_ok ? 3 : 0});
  auto joined = [&](int max_drop) {
    std::string line;
    for (const auto& p : parts)
      if (p.drop == 0 || p.drop > max_drop) line += p.text;
    return line;
  };
  std::string line = joined(0);
  for (int dropped = 1; width > 0 && line.size() > width && dropped <= 3; ++dropped)
    line = joined(dropped);
  if (width > 0 && line.size() > width) line.resize(width);
  return line;
}

up_progress::up_progress(std::FILE* out, bool tty, std::chrono::milliseconds heartbeat)
    : out_(out), tty_(tty), heartbeat_(heartbeat) {
  if (tty_) capture_stderr();
}

up_progress::~up_progress() { finish(); }

void up_progress::capture_stderr() {
  int fds[2];
  // Close-on-exec: a node started meanwhile must not hold the pipe open past finish().
  if (::pipe2(fds, O_CLOEXEC) != 0) return;  // uncaptured: log lines may land in the line
  std::fflush(stderr);
  saved_stderr_ = ::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 0);
  if (saved_stderr_ < 0 || ::dup2(fds[1], STDERR_FILENO) < 0) {
    if (saved_stderr_ >= 0) ::close(saved_stderr_);
    saved_stderr_ = -1;
    ::close(fds[0]);
    ::close(fds[1]);
    return;
  }
  ::close(fds[1]);
  capture_read_ = fds[0];
  capture_ = std::thread([this] { pass_stderr_lines(); });
}

void up_progress::pass_stderr_lines() {
  std::string pending;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(capture_read_, buf, sizeof buf);
    if (n <= 0) break;  // EOF: finish() gave stderr back
    pending.append(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1))
      message(pending.substr(0, nl));
  }
  if (!pending.empty()) message(pending);
}

void up_progress::update(const json& status, const json& job_stats) {
  const auto now = clock::now();
  const json acct = status.value("accounting", json::object());
  progress_figures f;
  f.iteration = status.value("iteration", uint64_t{0});
  f.iterations = status.value("iterations", uint64_t{0});
  f.lost = acct.value("lost", uint64_t{0});
  f.duplicated = acct.value("duplicated", uint64_t{0});
  f.invariant_ok = status.value("invariant_ok", false);
  // value(), not operator[]: stats sent before the first step carry no curve.
  const json curve =
      job_stats.is_object() ? job_stats.value("reward_curve", json::array()) : json::array();
  if (curve.is_array() && !curve.empty() && curve.back().is_object()) {
    f.has_reward = true;
    f.reward = curve.back().value("mean_reward", 0.0);
    f.reward_random = job_stats.value("reward_random", 0.0);
    f.reward_max = job_stats.value("reward_max", 1.0);
  }
  // samples/s: samples trained over the window (a restarted coordinator may count lower).
  const uint64_t trained = acct.value("trained", uint64_t{0});
  if (!trained_.empty() && trained < trained_.back().second) trained_.clear();
  trained_.emplace_back(now, trained);
  while (trained_.size() > 2 && now - trained_.front().first > kRateWindow) trained_.pop_front();
  const double dt = std::chrono::duration<double>(now - trained_.front().first).count();
  f.samples_per_s = dt > 0 ? double(trained - trained_.front().second) / dt : 0;
  // ETA: the mean iteration time since the first iteration this display saw end (the time
  // before it is start-up, not iterations). A restarted count starts over.
  if (!printed_any_ || f.iteration < last_.iteration) {
    have_first_ = false;
    start_iteration_ = f.iteration;
  }
  if (!have_first_ && f.iteration != start_iteration_) {
    first_iteration_ = {now, f.iteration};
    have_first_ = true;
  }
  if (have_first_ && f.iteration > first_iteration_.second && f.iterations >= f.iteration) {
    const double per = std::chrono::duration<double>(now - first_iteration_.first).count() /
                       double(f.iteration - first_iteration_.second);
    f.eta_s = per * double(f.iterations - f.iteration);
  }
  if (have_first_ && f.iterations > 0 && f.iteration >= f.iterations) f.eta_s = 0;
  std::lock_guard<std::mutex> lock(mu_);
  if (tty_) {
    draw(progress_line(f, terminal_columns(out_)));
  } else {
    const bool changed = !printed_any_ || f.iteration != last_.iteration || f.lost != last_.lost ||
                         f.duplicated != last_.duplicated || f.invariant_ok != last_.invariant_ok;
    if (changed || now - last_line_at_ >= heartbeat_) {
      std::fprintf(out_, "%s\n", progress_line(f, 0).c_str());
      std::fflush(out_);
      last_line_at_ = now;
    }
  }
  printed_any_ = true;
  last_ = f;
}

void up_progress::settled(const json& report) {
  if (!report.contains("policy_version") || !report.contains("accounting")) return;
  json acct = report["accounting"];
  const bool invariant_ok = acct.value("invariant_ok", false);
  json status{{"iteration", report["policy_version"]},
              {"iterations", last_.iterations},
              {"accounting", std::move(acct)},
              {"invariant_ok", invariant_ok}};
  update(status, report);  // the report carries reward_curve, reward_random, reward_max
}

void up_progress::draw(const std::string& line) {
  std::fprintf(out_, "\r\033[K%s", line.c_str());
  std::fflush(out_);
  shown_ = line;
}

void up_progress::message(const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  if (tty_ && !shown_.empty()) {
    std::fprintf(out_, "\r\033[K%s\n%s", line.c_str(), shown_.c_str());
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

void up_progress::finish() {
  if (saved_stderr_ >= 0) {
    std::fflush(stderr);
    ::dup2(saved_stderr_, STDERR_FILENO);  // closes the pipe's last write end: the thread ends
    ::close(saved_stderr_);
    saved_stderr_ = -1;
    capture_.join();
    ::close(capture_read_);
    capture_read_ = -1;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (tty_ && !shown_.empty()) std::fputc('\n', out_);
  shown_.clear();
  std::fflush(out_);
}

}  // namespace moerl::apps
