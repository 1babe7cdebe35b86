#include "workers/external_scorer.h"

#include <chrono>

#include "common/log.h"
#include "workers/worker_protocol.h"

namespace moerl::workers {
namespace {

// attach: how long one start waits for the user's worker to connect. Short: the caller is
// a role loop, and a sample or lease without a worker fails and is tried again later.
constexpr int64_t kAttachWaitMs = 1000;

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

result<std::unique_ptr<external_scorer>> external_scorer::create(external_scorer_options opts) {
  auto spec = parse_worker_spec(opts.worker, "reward", opts.python);
  if (!spec) return spec.err();
  return std::unique_ptr<external_scorer>(new external_scorer(std::move(opts), std::move(*spec)));
}

void external_scorer::drop_worker(const std::string& why) {
  if (!proc_) return;
  proc_->kill();
  last_death_ = why + " (" + proc_->poll_exit().value_or("?") + ")";
  logger("reward")->warn("reward worker pid {} stopped: {}; restarting it in {} ms", proc_->pid(),
                         last_death_, opts_.restart_backoff_ms);
  ++deaths_;
  proc_.reset();
  next_start_ms_ = now_ms() + opts_.restart_backoff_ms;
}

status external_scorer::ensure_started() {
  if (proc_) return {};
  if (now_ms() < next_start_ms_)
    return error(errc::peer_dead,
                 "reward worker '" + spec_.text + "' is restarting after: " + last_death_);
  auto p = worker_process::start(spec_, "reward", kAttachWaitMs);
  if (!p) {
    next_start_ms_ = now_ms() + opts_.restart_backoff_ms;
    last_death_ = p.err().to_string();
    return p.err();
  }
  proc_ = std::move(*p);
  ++starts_;
  auto log = logger("reward");
  log->info("reward worker '{}' started: pid {}", spec_.text, proc_->pid());
  // The worker speaks first: "hello" once its function is imported and callable.
  auto got = proc_->channel().receive(opts_.start_timeout_ms);
  std::string why;
  if (!got) {
    why = "before its hello: " + got.err().to_string();
  } else if (!*got) {
    why = "no hello within worker.start_timeout_ms=" + std::to_string(opts_.start_timeout_ms);
  } else {
    auto c = check_envelope(**got, {"hello"});
    if (!c.ok) {
      why = std::string("its hello was refused: ") + refusal_name(c.why) + ": " + c.detail;
      (void)proc_->channel().send(error_frame(c.why, c.detail), 1000);
    } else if ((**got).value("role", "") != "reward") {
      why = "it said hello as role '" + (**got).value("role", "") + "', not reward";
      (void)proc_->channel().send(error_frame(refusal::malformed, why), 1000);
    }
  }
  if (why.empty()) {
    auto s = proc_->channel().send(
        {{"v", kProtocolVersion}, {"type", "welcome"}, {"role", "reward"}}, 1000);
    if (s) return {};
    why = "welcome: " + s.err().to_string();
  }
  drop_worker("failed to start: " + why);
  return error(errc::peer_dead, "reward worker '" + spec_.text + "' " + last_death_);
}

result<float> external_scorer::score(const std::vector<uint32_t>& prompt,
                                     const std::vector<uint32_t>& tokens, uint64_t unit,
                                     uint64_t seq) {
  if (auto s = ensure_started(); !s) return s.err();
  const uint64_t id = next_id_++;
  const int64_t deadline = now_ms() + opts_.timeout_ms;
  auto& ch = proc_->channel();
  if (auto s = ch.send({{"v", kProtocolVersion},
                        {"type", "score"},
                        {"id", id},
                        {"unit", unit},
                        {"seq", seq},
                        {"prompt", prompt},
                        {"tokens", tokens}},
                       opts_.timeout_ms);
      !s) {
    drop_worker("score request: " + s.err().to_string());
    return error(errc::peer_dead, "reward worker: " + last_death_);
  }
  for (;;) {
    const int64_t left = deadline - now_ms();
    auto got = ch.receive(left > 0 ? left : 0);
    if (!got) {
      if (got.err().code == errc::malformed_message) {  // the channel is still in frame
        ++refused_;
        (void)ch.send(error_frame(refusal::malformed, got.err().message), 1000);
        continue;
      }
      drop_worker(got.err().to_string());
      return error(errc::peer_dead, "reward worker died scoring unit " + std::to_string(unit) +
                                        " seq " + std::to_string(seq) + ": " + last_death_);
    }
    if (!*got) {
      ++timed_out_;
      drop_worker("no answer within reward.worker_timeout_ms=" + std::to_string(opts_.timeout_ms));
      return error(errc::timeout, "reward worker gave no score for unit " + std::to_string(unit) +
                                      " seq " + std::to_string(seq) + " within " +
                                      std::to_string(opts_.timeout_ms) + " ms");
    }
    const auto& msg = **got;
    auto c = check_envelope(msg, {"score_result", "score_error"});
    uint64_t got_id = 0;
    std::string detail;
    if (c.ok && !read_u64(msg, "id", got_id, detail)) {
      c.ok = false;
      c.why = refusal::malformed;
      c.detail = detail;
    } else if (c.ok && got_id != id) {
      c.ok = false;
      c.why = refusal::wrong_id;
      c.detail = "reply to id " + std::to_string(got_id) + "; the outstanding request is id " +
                 std::to_string(id);
    }
    double reward = 0;
    if (c.ok && c.type == "score_result" && !read_finite(msg, "reward", reward, detail)) {
      c.ok = false;
      c.why = refusal::malformed;
      c.detail = detail;
    }
    if (!c.ok) {
      ++refused_;
      logger("reward")->warn("reward worker message refused ({}): {}", refusal_name(c.why),
                             c.detail);
      (void)ch.send(error_frame(c.why, c.detail), 1000);
      continue;
    }
    if (c.type == "score_error") {
      ++raised_;
      return error(errc::invalid_argument,
                   "the reward worker's function raised on unit " + std::to_string(unit) + " seq " +
                       std::to_string(seq) + ": " + msg.value("error", "?") + "\n" +
                       msg.value("traceback", ""));
    }
    ++scored_;
    return static_cast<float>(reward);
  }
}

nlohmann::json external_scorer::stats() const {
  return {{"scored", scored_},           {"raised", raised_},        {"timed_out", timed_out_},
          {"refused_replies", refused_}, {"worker_starts", starts_}, {"worker_deaths", deaths_}};
}

}  // namespace moerl::workers
