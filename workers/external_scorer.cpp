#include "workers/external_scorer.h"

#include <chrono>
#include <functional>

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

result<nlohmann::json> external_scorer::request(
    nlohmann::json msg, uint64_t id, size_t items, const std::string& what,
    const std::function<std::string(const nlohmann::json&)>& check_result) {
  if (auto s = link_.ensure_started(); !s) return s.err();
  // A batch is bounded as its items one after the other would be.
  const int64_t timeout_ms = opts_.timeout_ms * static_cast<int64_t>(items);
  const std::string bound = "reward.worker_timeout_ms=" + std::to_string(opts_.timeout_ms) +
                            (items > 1 ? " x " + std::to_string(items) + " samples" : "");
  const int64_t deadline = now_ms() + timeout_ms;
  auto& ch = link_.channel();
  const std::string reply_type = msg["type"] == "score" ? "score_result" : "score_batch_result";
  if (auto s = ch.send(msg, timeout_ms); !s) {
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
      return error(errc::peer_dead,
                   "reward worker died scoring " + what + ": " + link_.last_death());
    }
    if (!*got) {
      ++timed_out_;
      link_.drop("no answer within " + bound);
      return error(errc::timeout, "reward worker gave no score for " + what + " within " +
                                      std::to_string(timeout_ms) + " ms (" + bound + ")");
    }
    auto& reply = **got;
    auto c = check_envelope(reply, {reply_type.c_str(), "score_error"});
    uint64_t got_id = 0;
    std::string detail;
    if (c.ok && !read_u64(reply, "id", got_id, detail)) {
      c.ok = false;
      c.why = refusal::malformed;
      c.detail = detail;
    } else if (c.ok && got_id != id) {
      c.ok = false;
      c.why = refusal::wrong_id;
      c.detail = "reply to id " + std::to_string(got_id) + "; the outstanding request is id " +
                 std::to_string(id);
    } else if (c.ok && c.type == reply_type) {
      if (auto bad = check_result(reply); !bad.empty()) {
        c.ok = false;
        c.why = refusal::malformed;
        c.detail = bad;
      }
    }
    if (!c.ok) {
      ++refused_;
      logger("reward")->warn("reward worker message refused ({}): {}", refusal_name(c.why),
                             c.detail);
      (void)ch.send(error_frame(c.why, c.detail), 1000);
      continue;
    }
    return std::move(reply);
  }
}

// A checked reply (or one entry of a batch's results): the reward, or the user's exception.
result<float> external_scorer::outcome(const nlohmann::json& r, bool is_error, uint64_t unit,
                                       uint64_t seq) {
  if (is_error) {
    ++raised_;
    return error(errc::invalid_argument, "the reward worker's function raised on unit " +
                                             std::to_string(unit) + " seq " + std::to_string(seq) +
                                             ": " + r.value("error", "?") + "\n" +
                                             r.value("traceback", ""));
  }
  ++scored_;
  return static_cast<float>(r.at("reward").get<double>());
}

namespace {

// "" when `r` carries a finite float32 reward; else what is wrong.
std::string bad_reward(const nlohmann::json& r) {
  double reward = 0;
  std::string detail;
  return read_finite(r, "reward", reward, detail) ? "" : detail;
}

}  // namespace

result<float> external_scorer::score(const std::vector<uint32_t>& prompt,
                                     const std::vector<uint32_t>& tokens, uint64_t unit,
                                     uint64_t seq) {
  const uint64_t id = next_id_++;
  auto reply =
      request({{"v", kProtocolVersion},
               {"type", "score"},
               {"id", id},
               {"unit", unit},
               {"seq", seq},
               {"prompt", prompt},
               {"tokens", tokens}},
              id, 1, "unit " + std::to_string(unit) + " seq " + std::to_string(seq), bad_reward);
  if (!reply) return reply.err();
  return outcome(*reply, reply->value("type", "") == "score_error", unit, seq);
}

std::vector<result<float>> external_scorer::score_many(const std::vector<score_item>& items) {
  if (items.size() == 1)
    return {score(*items[0].prompt, *items[0].tokens, items[0].unit, items[0].seq)};
  std::vector<result<float>> out;
  if (items.empty()) return out;
  const uint64_t id = next_id_++;
  auto list = nlohmann::json::array();
  for (const auto& it : items)
    list.push_back(
        {{"unit", it.unit}, {"seq", it.seq}, {"prompt", *it.prompt}, {"tokens", *it.tokens}});
  // One result per item, each a finite reward or an error (the user's exception).
  const size_t n = items.size();
  auto check = [n](const nlohmann::json& r) -> std::string {
    auto results = r.find("results");
    if (results == r.end() || !results->is_array() || results->size() != n)
      return "results: expected a list of " + std::to_string(n) + " entries, one per item";
    for (size_t i = 0; i < n; ++i) {
      const auto& e = (*results)[i];
      if (!e.is_object()) return "results[" + std::to_string(i) + "] is not an object";
      if (e.contains("error")) continue;
      if (auto bad = bad_reward(e); !bad.empty())
        return "results[" + std::to_string(i) + "]: " + bad;
    }
    return "";
  };
  auto reply = request(
      {{"v", kProtocolVersion}, {"type", "score_batch"}, {"id", id}, {"items", std::move(list)}},
      id, n, std::to_string(n) + " samples of unit " + std::to_string(items[0].unit), check);
  for (size_t i = 0; i < n; ++i) {
    if (!reply) {
      out.push_back(reply.err());
    } else if (reply->value("type", "") == "score_error") {  // the batch failed as a whole
      out.push_back(outcome(*reply, true, items[i].unit, items[i].seq));
    } else {
      const auto& e = (*reply)["results"][i];
      out.push_back(outcome(e, e.contains("error"), items[i].unit, items[i].seq));
    }
  }
  return out;
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
