#include "workers/rollout_session.h"

#include <chrono>

#include "common/log.h"

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

nlohmann::json frame(const char* type) { return {{"v", kProtocolVersion}, {"type", type}}; }

}  // namespace

result<std::unique_ptr<rollout_session>> rollout_session::create(rollout_session_options opts) {
  auto spec = parse_worker_spec(opts.worker, "rollout", opts.python);
  if (!spec) return spec.err();
  return std::unique_ptr<rollout_session>(new rollout_session(std::move(opts), std::move(*spec)));
}

void rollout_session::drop_worker(const std::string& why) {
  if (!proc_) return;
  proc_->kill();
  last_death_ = why + " (" + proc_->poll_exit().value_or("?") + ")";
  logger("rollout")->warn("rollout worker pid {} stopped: {}; restarting it in {} ms", proc_->pid(),
                          last_death_, opts_.restart_backoff_ms);
  ++deaths_;
  proc_.reset();
  next_start_ms_ = now_ms() + opts_.restart_backoff_ms;
}

void rollout_session::stop(int64_t grace_ms) {
  if (proc_) proc_->stop(grace_ms);
  proc_.reset();
}

status rollout_session::ensure_started() {
  if (proc_) return {};
  if (now_ms() < next_start_ms_)
    return error(errc::peer_dead,
                 "rollout worker '" + spec_.text + "' is restarting after: " + last_death_);
  auto p = worker_process::start(spec_, "rollout", kAttachWaitMs);
  if (!p) {
    next_start_ms_ = now_ms() + opts_.restart_backoff_ms;
    last_death_ = p.err().to_string();
    return p.err();
  }
  proc_ = std::move(*p);
  ++starts_;
  noticed_ = false;
  logger("rollout")->info("rollout worker '{}' started: pid {}", spec_.text, proc_->pid());
  auto got = proc_->channel().receive(opts_.start_timeout_ms);
  std::string why;
  if (!got) {
    why = "before its hello: " + got.err().to_string();
  } else if (!*got) {
    why = "no hello within worker.start_timeout_ms=" + std::to_string(opts_.start_timeout_ms);
  } else if (auto c = check_envelope(**got, {"hello"}); !c.ok) {
    why = std::string("its hello was refused: ") + refusal_name(c.why) + ": " + c.detail;
    (void)proc_->channel().send(error_frame(c.why, c.detail), 1000);
  } else if ((**got).value("role", "") != "rollout") {
    why = "it said hello as role '" + (**got).value("role", "") + "', not rollout";
    (void)proc_->channel().send(error_frame(refusal::malformed, why), 1000);
  }
  if (why.empty()) {
    auto w = frame("welcome");
    w["role"] = "rollout";
    w["vocab_size"] = opts_.vocab_size;
    w["max_completion_tokens"] = opts_.max_completion_tokens;
    auto s = proc_->channel().send(w, 1000);
    if (s) return {};
    why = "welcome: " + s.err().to_string();
  }
  drop_worker("failed to start: " + why);
  return error(errc::peer_dead, "rollout worker '" + spec_.text + "' " + last_death_);
}

status rollout_session::offer(const lease_offer& l) {
  if (auto s = ensure_started(); !s) return s;
  lease_ = l;
  has_lease_ = true;
  submitted_.clear();
  ++offered_;
  auto m = frame("lease");
  m["unit"] = l.unit;
  m["attempt"] = l.attempt;
  m["policy_version"] = l.policy_version;
  m["group_size"] = l.group_size;
  m["deadline_unix_ms"] = l.deadline_unix_ms;
  m["sampling"] = l.sampling.is_null() ? nlohmann::json::object() : l.sampling;
  auto groups = nlohmann::json::array();
  for (const auto& [id, prompt] : l.groups)
    groups.push_back({{"group_id", id}, {"prompt", prompt}});
  m["groups"] = std::move(groups);
  if (auto s = proc_->channel().send(m, 5000); !s) {
    drop_worker("lease offer: " + s.err().to_string());
    return error(errc::peer_dead, "rollout worker: " + last_death_);
  }
  return {};
}

void rollout_session::refuse(refusal why, const std::string& detail) {
  ++refused_[refusal_name(why)];
  logger("rollout")->warn("rollout worker message refused ({}): {}", refusal_name(why), detail);
  if (proc_) (void)proc_->channel().send(error_frame(why, detail), 1000);
}

bool rollout_session::check_sample(const nlohmann::json& msg, accepted_sample& out) {
  std::string d;
  uint64_t unit = 0, attempt = 0, group_id = 0, index = 0;
  if (!read_u64(msg, "unit", unit, d) || !read_u64(msg, "attempt", attempt, d) ||
      !read_u64(msg, "group_id", group_id, d) || !read_u64(msg, "index", index, d)) {
    refuse(refusal::malformed, d);
    return false;
  }
  const std::string what = "sample of unit " + std::to_string(unit) + " attempt " +
                           std::to_string(attempt) + " group " + std::to_string(group_id) +
                           " index " + std::to_string(index);
  if (!has_lease_ || unit != lease_.unit) {
    auto past = past_attempts_.find(unit);
    if (past != past_attempts_.end())
      refuse(refusal::stale_fencing_token,
             what + ": that lease has ended (attempt " + std::to_string(past->second) + ")");
    else
      refuse(refusal::unknown_unit,
             what + ": this worker holds no lease on unit " + std::to_string(unit));
    return false;
  }
  if (attempt != lease_.attempt) {
    refuse(refusal::stale_fencing_token,
           what + ": the lease's fencing token is " + std::to_string(lease_.attempt));
    return false;
  }
  uint32_t gi = 0;
  while (gi < lease_.groups.size() && lease_.groups[gi].first != group_id) ++gi;
  if (gi == lease_.groups.size()) {
    refuse(refusal::malformed,
           what + ": group " + std::to_string(group_id) + " is not in the lease");
    return false;
  }
  if (index >= lease_.group_size) {
    refuse(refusal::malformed,
           what + ": index must be below the group size " + std::to_string(lease_.group_size));
    return false;
  }
  if (!read_u32_list(msg, "tokens", out.tokens, d) ||
      !read_float_list(msg, "logprobs", out.logprobs, d)) {
    refuse(refusal::malformed, what + ": " + d);
    return false;
  }
  if (out.tokens.empty() || out.logprobs.size() != out.tokens.size()) {
    refuse(refusal::malformed, what + ": " + std::to_string(out.tokens.size()) + " tokens and " +
                                   std::to_string(out.logprobs.size()) +
                                   " logprobs; expected one logprob per token, at least one");
    return false;
  }
  if (opts_.max_completion_tokens && out.tokens.size() > opts_.max_completion_tokens) {
    refuse(refusal::malformed, what + ": " + std::to_string(out.tokens.size()) +
                                   " tokens; the job trains on at most " +
                                   std::to_string(opts_.max_completion_tokens));
    return false;
  }
  for (size_t i = 0; i < out.tokens.size(); ++i) {
    if (opts_.vocab_size && out.tokens[i] >= opts_.vocab_size) {
      refuse(refusal::malformed, what + ": token " + std::to_string(out.tokens[i]) +
                                     " is outside the vocabulary of " +
                                     std::to_string(opts_.vocab_size));
      return false;
    }
    if (out.logprobs[i] > 1e-6f) {
      refuse(refusal::malformed, what + ": logprob " + std::to_string(out.logprobs[i]) +
                                     " is above 0; expected log-probabilities");
      return false;
    }
  }
  if (!submitted_.insert({gi, static_cast<uint32_t>(index)}).second) {
    refuse(refusal::duplicate, what + ": already submitted under this lease");
    return false;
  }
  out.group_index = gi;
  out.index_in_group = static_cast<uint32_t>(index);
  return true;
}

result<rollout_event> rollout_session::next(int64_t wait_ms) {
  if (!proc_) return error(errc::peer_dead, "rollout worker: " + last_death_);
  const int64_t deadline = now_ms() + wait_ms;
  for (;;) {
    const int64_t left = deadline - now_ms();
    auto got = proc_->channel().receive(left > 0 ? left : 0);
    if (!got) {
      if (got.err().code == errc::malformed_message) {
        refuse(refusal::malformed, got.err().message);
        continue;
      }
      drop_worker(got.err().to_string());
      return error(errc::peer_dead, "rollout worker: " + last_death_);
    }
    if (!*got) return rollout_event{};
    const auto& msg = **got;
    auto c = check_envelope(msg, {"sample", "lease_done", "give_back"});
    if (!c.ok) {
      refuse(c.why, c.detail);
      continue;
    }
    rollout_event ev;
    if (c.type == "sample") {
      if (!check_sample(msg, ev.sample)) continue;
      ++accepted_;
      ev.kind = rollout_event_kind::sample;
      return ev;
    }
    // lease_done / give_back name the lease they end.
    uint64_t unit = 0, attempt = 0;
    std::string d;
    if (!read_u64(msg, "unit", unit, d) || !read_u64(msg, "attempt", attempt, d)) {
      refuse(refusal::malformed, d);
      continue;
    }
    if (!has_lease_ || unit != lease_.unit || attempt != lease_.attempt) {
      const bool known = has_lease_ && unit == lease_.unit;
      refuse(known || past_attempts_.count(unit) ? refusal::stale_fencing_token
                                                 : refusal::unknown_unit,
             c.type + " for unit " + std::to_string(unit) + " attempt " + std::to_string(attempt) +
                 ": not the current lease");
      continue;
    }
    ev.kind = c.type == "lease_done" ? rollout_event_kind::done : rollout_event_kind::give_back;
    ev.reason = msg.value("reason", "");
    return ev;
  }
}

status rollout_session::ack(const accepted_sample& s) {
  if (!proc_) return error(errc::peer_dead, "rollout worker: " + last_death_);
  auto m = frame("sample_ack");
  m["unit"] = lease_.unit;
  m["attempt"] = lease_.attempt;
  m["group_id"] = lease_.groups[s.group_index].first;
  m["index"] = s.index_in_group;
  if (auto st = proc_->channel().send(m, 5000); !st) {
    drop_worker("sample ack: " + st.err().to_string());
    return error(errc::peer_dead, "rollout worker: " + last_death_);
  }
  return {};
}

status rollout_session::notice(int64_t deadline_unix_ms, const std::string& reason) {
  if (!proc_) return error(errc::peer_dead, "rollout worker: " + last_death_);
  if (noticed_) return {};
  noticed_ = true;
  auto m = frame("notice");
  m["deadline_unix_ms"] = deadline_unix_ms;
  m["reason"] = reason;
  if (auto st = proc_->channel().send(m, 1000); !st) {
    drop_worker("notice: " + st.err().to_string());
    return error(errc::peer_dead, "rollout worker: " + last_death_);
  }
  return {};
}

status rollout_session::close(const std::string& st, const std::string& reason) {
  if (!has_lease_) return {};
  past_attempts_[lease_.unit] = lease_.attempt;
  has_lease_ = false;
  if (!proc_) return {};
  auto m = frame("lease_closed");
  m["unit"] = lease_.unit;
  m["attempt"] = lease_.attempt;
  m["status"] = st;
  m["reason"] = reason;
  if (auto s = proc_->channel().send(m, 1000); !s) {
    drop_worker("lease close: " + s.err().to_string());
    return error(errc::peer_dead, "rollout worker: " + last_death_);
  }
  return {};
}

nlohmann::json rollout_session::stats() const {
  return {{"samples_accepted", accepted_},
          {"refused", refused_},
          {"worker_starts", starts_},
          {"worker_deaths", deaths_},
          {"leases_offered", offered_}};
}

}  // namespace moerl::workers
