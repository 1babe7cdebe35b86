#include "workers/worker_link.h"

#include <chrono>

#include "common/log.h"
#include "workers/worker_protocol.h"

namespace moerl::workers {
namespace {

// attach: how long one start waits for the user's worker to connect. Short: the caller is a
// role loop, and a sample, lease or step without a worker fails and is tried again later.
constexpr int64_t kAttachWaitMs = 1000;

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void worker_link::drop(const std::string& why) {
  if (!proc_) return;
  proc_->kill();
  last_death_ = why + " (" + proc_->poll_exit().value_or("?") + ")";
  logger(opts_.role)
      ->warn("{} worker pid {} stopped: {}; restarting it in {} ms", opts_.role, proc_->pid(),
             last_death_, opts_.restart_backoff_ms);
  ++deaths_;
  proc_.reset();
  next_start_ms_ = now_ms() + opts_.restart_backoff_ms;
}

void worker_link::stop(int64_t grace_ms) {
  if (proc_) proc_->stop(grace_ms);
  proc_.reset();
}

status worker_link::ensure_started() {
  if (proc_) return {};
  const std::string name = opts_.role + " worker '" + spec_.text + "'";
  if (now_ms() < next_start_ms_)
    return error(errc::peer_dead, name + " is restarting after: " + last_death_);
  auto p = worker_process::start(spec_, opts_.role, kAttachWaitMs);
  if (!p) {
    next_start_ms_ = now_ms() + opts_.restart_backoff_ms;
    last_death_ = p.err().to_string();
    return p.err();
  }
  proc_ = std::move(*p);
  ++starts_;
  logger(opts_.role)->info("{} started: pid {}", name, proc_->pid());
  // The worker speaks first: "hello" once its function is imported and callable.
  auto got = proc_->channel().receive(opts_.start_timeout_ms);
  std::string why;
  if (!got) {
    why = "before its hello: " + got.err().to_string();
  } else if (!*got) {
    why = "no hello within worker.start_timeout_ms=" + std::to_string(opts_.start_timeout_ms);
  } else if (auto c = check_envelope(**got, {"hello"}); !c.ok) {
    why = std::string("its hello was refused: ") + refusal_name(c.why) + ": " + c.detail;
    (void)proc_->channel().send(error_frame(c.why, c.detail), 1000);
  } else if ((**got).value("role", "") != opts_.role) {
    why = "it said hello as role '" + (**got).value("role", "") + "', not " + opts_.role;
    (void)proc_->channel().send(error_frame(refusal::malformed, why), 1000);
  }
  if (why.empty()) {
    nlohmann::json w = opts_.welcome.is_object() ? opts_.welcome : nlohmann::json::object();
    w["v"] = kProtocolVersion;
    w["type"] = "welcome";
    w["role"] = opts_.role;
    auto s = proc_->channel().send(w, 1000);
    if (s) return {};
    why = "welcome: " + s.err().to_string();
  }
  drop("failed to start: " + why);
  return error(errc::peer_dead, name + " " + last_death_);
}

}  // namespace moerl::workers
