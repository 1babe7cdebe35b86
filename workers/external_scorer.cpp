#include "workers/external_scorer.h"

#include <chrono>

#include "common/log.h"
#include "workers/worker_protocol.h"

namespace moerl::workers {
namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

external_scorer::external_scorer(external_scorer_options opts, worker_spec spec)
    : opts_(std::move(opts)),
      link_(std::move(spec), {"reward", opts_.start_timeout_ms, opts_.restart_backoff_ms, {}}) {}

result<std::unique_ptr<external_scorer>> external_scorer::create(external_scorer_options opts) {
  auto spec = parse_worker_spec(opts.worker, "reward", opts.python);
  if (!spec) return spec.err();
  return std::unique_ptr<external_scorer>(new external_scorer(std::move(opts), std::move(*spec)));
}

status external_scorer::start() { return link_.ensure_started(); }

result<float> external_scorer::score(const std::vector<uint32_t>& prompt,
                                     const std::vector<uint32_t>& tokens, uint64_t unit,
                                     uint64_t seq) {
  if (auto s = link_.ensure_started(); !s) return s.err();
  const uint64_t id = next_id_++;
  const int64_t deadline = now_ms() + opts_.timeout_ms;
  auto& ch = link_.channel();
  if (auto s = ch.send({{"v", kProtocolVersion},
                        {"type", "score"},
                        {"id", id},
                        {"unit", unit},
                        {"seq", seq},
                        {"prompt", prompt},
                        {"tokens", tokens}},
                       opts_.timeout_ms);
      !s) {
    link_.drop("score request: " + s.err().to_string());
    return error(errc::peer_dead, "reward worker: " + link_.last_death());
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
      link_.drop(got.err().to_string());
      return error(errc::peer_dead, "reward worker died scoring unit " + std::to_string(unit) +
                                        " seq " + std::to_string(seq) + ": " + link_.last_death());
    }
    if (!*got) {
      ++timed_out_;
      link_.drop("no answer within reward.worker_timeout_ms=" + std::to_string(opts_.timeout_ms));
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
  return {{"scored", scored_},
          {"raised", raised_},
          {"timed_out", timed_out_},
          {"refused_replies", refused_},
          {"worker_starts", link_.starts()},
          {"worker_deaths", link_.deaths()}};
}

}  // namespace moerl::workers
