#include "apps/console_top.h"

#include <poll.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <iostream>

#include <nlohmann/json.hpp>

#include "apps/console_views.h"
#include "console/console_client.h"

namespace moerl::apps {

using nlohmann::json;

namespace {

using clock = std::chrono::steady_clock;

volatile std::sig_atomic_t g_quit = 0;
void on_quit_signal(int) { g_quit = 1; }

// Ctrl-C and SIGTERM end the loop (not the process), so the terminal is put back first.
// No SA_RESTART: a wait in poll() returns at once.
void catch_quit_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_quit_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// While it lives, a terminal on stdin delivers keys one at a time without echo (Ctrl-C
// still raises SIGINT); anything else on stdin is left alone and never read.
class key_input {
 public:
  key_input() {
    if (::isatty(STDIN_FILENO) != 1 || ::tcgetattr(STDIN_FILENO, &saved_) != 0) return;
    termios t = saved_;
    t.c_lflag &= static_cast<tcflag_t>(~(ICANON | ECHO));
    t.c_cc[VMIN] = 0;
    t.c_cc[VTIME] = 0;
    active_ = ::tcsetattr(STDIN_FILENO, TCSANOW, &t) == 0;
  }
  ~key_input() {
    if (active_) ::tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  key_input(const key_input&) = delete;
  key_input& operator=(const key_input&) = delete;

  // Waits up to `ms` (less when a signal arrives); true when q was pressed.
  bool wait_for_quit(int ms) {
    if (!active_) {
      ::poll(nullptr, 0, ms);
      return false;
    }
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (::poll(&p, 1, ms) <= 0) return false;
    char c;
    while (::read(STDIN_FILENO, &c, 1) == 1)
      if (c == 'q' || c == 'Q') return true;
    return false;
  }

 private:
  termios saved_{};
  bool active_ = false;
};

std::string wall_clock() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return buf;
}

}  // namespace

int console_top(const top_options& o) {
  const bool tty = ::isatty(STDOUT_FILENO) == 1;
  const double interval_s = o.interval_s > 0 ? o.interval_s : tty ? 1.0 : 5.0;
  const auto interval =
      std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(interval_s));
  catch_quit_signals();
  key_input keys;
  auto call = [&](const char* verb) -> result<json> {
    messages::admin_request req;
    req.request_id = 1;
    req.token = o.token;
    req.command = verb;
    auto rep = console::console_call(o.address, req, o.timeout_ms, o.keys);
    if (!rep) return rep.err();
    if (!rep->ok) return rep->err;
    auto body = json::parse(rep->body_json, nullptr, false);
    if (body.is_discarded()) return error(errc::malformed_message, "the reply is not JSON");
    return body;
  };
  auto show = [&](const std::string& frame) {
    if (tty)
      std::printf("\033[H\033[2J%s", frame.c_str());  // home, clear: redrawn in place
    else
      std::printf("--- %s\n%s\n", wall_clock().c_str(), frame.c_str());
    std::fflush(stdout);
  };
  if (tty) std::printf("\033[?25l");  // no cursor blinking over the table
  int rc = 0;
  auto last_answer = clock::now();
  auto next_frame = clock::now();
  while (!g_quit) {
    auto status = call("status");
    const auto now = clock::now();
    if (status) last_answer = now;
    if (!status && status.err().code == errc::unauthorized) {
      std::cerr << "moerl console top: " << status.err().to_string() << "\n";
      rc = 4;
      break;
    }
    const bool done = status && status->value("done", false);
    if (done || now >= next_frame) {
      std::string frame = "moerl console top  " + o.address + "  " + wall_clock() +
                          (tty ? "  (q or Ctrl-C quits)" : "") + "\n";
      if (status) {
        frame += status_summary(*status) + "\n";
        auto nodes = call("nodes");
        frame += nodes ? nodes_table(*nodes) : "nodes: " + nodes.err().to_string() + "\n";
      } else {
        frame += "the coordinator has not answered for " +
                 std::to_string(
                     std::chrono::duration_cast<std::chrono::seconds>(now - last_answer).count()) +
                 " s: " + status.err().to_string() + "\n";
      }
      show(frame);
      next_frame = now + interval;
    }
    if (done) {
      std::printf("moerl console top: the job is done\n");
      break;
    }
    if (!status && now - last_answer > std::chrono::duration<double>(o.give_up_s)) {
      std::cerr << "moerl console top: the coordinator at " << o.address << " has not answered for "
                << o.give_up_s
                << " s (the job ended, or its coordinator is down): " << status.err().to_string()
                << "\n";
      rc = 3;
      break;
    }
    if (keys.wait_for_quit(500)) break;
  }
  if (tty) std::printf("\033[?25h");
  std::fflush(stdout);
  return rc;
}

}  // namespace moerl::apps
