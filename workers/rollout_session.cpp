#include "workers/rollout_session.h"

#include <algorithm>
#include <chrono>

#include "common/log.h"

namespace moerl::workers {
namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

nlohmann::json frame(const char* type) { return {{"v", kProtocolVersion}, {"type", type}}; }

// The welcome's fields beyond the role: the job's limits on a sample, a group's place.
nlohmann::json welcome_of(const rollout_session_options& o) {
  nlohmann::json w{{"vocab_size", o.vocab_size},
                   {"max_completion_tokens", o.max_completion_tokens}};
  if (o.group.is_object()) w["group"] = o.group;
  return w;
}

}  // namespace

rollout_session::rollout_session(rollout_session_options o, worker_spec s)
    : opts_(std::move(o)),
      link_(std::move(s),
            {"rollout", opts_.start_timeout_ms, opts_.restart_backoff_ms, welcome_of(opts_)}),
      rank_(opts_.group.is_object() ? opts_.group.value("rank", 0u) : 0u) {}

result<std::unique_ptr<rollout_session>> rollout_session::create(rollout_session_options opts) {
  auto spec = parse_worker_spec(opts.worker, "rollout", opts.python);
  if (!spec) return spec.err();
  return std::unique_ptr<rollout_session>(new rollout_session(std::move(opts), std::move(*spec)));
}

status rollout_session::lost(const std::string& why) {
  link_.drop(why);
  return error(errc::peer_dead, "rollout worker: " + link_.last_death());
}

void rollout_session::stop(int64_t grace_ms) { link_.stop(grace_ms); }

status rollout_session::start() { return link_.ensure_started(); }

status rollout_session::offer(const lease_offer& l) {
  if (auto s = link_.ensure_started(); !s) return s;
  // Write the version's file before the worker asks for it: a worker still starting (importing
  // its framework) asks a second later, when newer versions may have pushed this one out of
  // every cache. The file stays until newer ones replace it. A failure here is the worker's
  // answer to its own request (weights_error), not the offer's.
  if (l.policy_version > 0 && opts_.weights) (void)opts_.weights(l.policy_version, false);
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
  if (auto s = link_.channel().send(m, 5000); !s)
    return lost("lease offer: " + s.err().to_string());
  return {};
}

void rollout_session::refuse(refusal why, const std::string& detail) {
  ++refused_[refusal_name(why)];
  logger("rollout")->warn("rollout worker message refused ({}): {}", refusal_name(why), detail);
  if (link_.running()) (void)link_.channel().send(error_frame(why, detail), 1000);
}

// A refusal found while checking a submission: sent and counted by the caller, once per message.
struct rollout_session::bad_sample {
  refusal why;
  std::string detail;
};

std::optional<rollout_session::bad_sample> rollout_session::check_fencing(const nlohmann::json& msg,
                                                                          const char* what) {
  std::string d;
  uint64_t unit = 0, attempt = 0;
  if (!read_u64(msg, "unit", unit, d) || !read_u64(msg, "attempt", attempt, d))
    return bad_sample{refusal::malformed, d};
  const std::string of = std::string(what) + " of unit " + std::to_string(unit) + " attempt " +
                         std::to_string(attempt);
  if (!has_lease_ || unit != lease_.unit) {
    auto past = past_attempts_.find(unit);
    if (past != past_attempts_.end())
      return bad_sample{refusal::stale_fencing_token, of + ": that lease has ended (attempt " +
                                                          std::to_string(past->second) + ")"};
    return bad_sample{refusal::unknown_unit,
                      of + ": this worker holds no lease on unit " + std::to_string(unit)};
  }
  if (attempt != lease_.attempt)
    return bad_sample{refusal::stale_fencing_token,
                      of + ": the lease's fencing token is " + std::to_string(lease_.attempt)};
  return std::nullopt;
}

std::optional<rollout_session::bad_sample> rollout_session::check_response(
    const nlohmann::json& item, const std::set<std::pair<uint32_t, uint32_t>>& also_taken,
    accepted_sample& out) {
  std::string d;
  uint64_t group_id = 0, index = 0;
  if (!read_u64(item, "group_id", group_id, d) || !read_u64(item, "index", index, d))
    return bad_sample{refusal::malformed, d};
  const std::string what = "sample of unit " + std::to_string(lease_.unit) + " attempt " +
                           std::to_string(lease_.attempt) + " group " + std::to_string(group_id) +
                           " index " + std::to_string(index);
  uint32_t gi = 0;
  while (gi < lease_.groups.size() && lease_.groups[gi].first != group_id) ++gi;
  if (gi == lease_.groups.size())
    return bad_sample{refusal::malformed,
                      what + ": group " + std::to_string(group_id) + " is not in the lease"};
  if (index >= lease_.group_size)
    return bad_sample{refusal::malformed, what + ": index must be below the group size " +
                                              std::to_string(lease_.group_size)};
  if (!read_u32_list(item, "tokens", out.tokens, d) ||
      !read_float_list(item, "logprobs", out.logprobs, d))
    return bad_sample{refusal::malformed, what + ": " + d};
  if (out.tokens.empty() || out.logprobs.size() != out.tokens.size())
    return bad_sample{refusal::malformed,
                      what + ": " + std::to_string(out.tokens.size()) + " tokens and " +
                          std::to_string(out.logprobs.size()) +
                          " logprobs; expected one logprob per token, at least one"};
  if (opts_.max_completion_tokens && out.tokens.size() > opts_.max_completion_tokens)
    return bad_sample{refusal::malformed, what + ": " + std::to_string(out.tokens.size()) +
                                              " tokens; the job trains on at most " +
                                              std::to_string(opts_.max_completion_tokens)};
  for (size_t i = 0; i < out.tokens.size(); ++i) {
    if (opts_.vocab_size && out.tokens[i] >= opts_.vocab_size)
      return bad_sample{refusal::malformed, what + ": token " + std::to_string(out.tokens[i]) +
                                                " is outside the vocabulary of " +
                                                std::to_string(opts_.vocab_size)};
    if (out.logprobs[i] > 1e-6f)
      return bad_sample{refusal::malformed, what + ": logprob " + std::to_string(out.logprobs[i]) +
                                                " is above 0; expected log-probabilities"};
  }
  const std::pair<uint32_t, uint32_t> slot{gi, static_cast<uint32_t>(index)};
  if (submitted_.count(slot) || also_taken.count(slot))
    return bad_sample{refusal::duplicate, what + ": already submitted under this lease"};
  out.group_index = gi;
  out.index_in_group = static_cast<uint32_t>(index);
  return std::nullopt;
}

bool rollout_session::check_submission(const nlohmann::json& msg, bool batch,
                                       std::vector<accepted_sample>& out) {
  out.clear();
  if (auto bad = check_fencing(msg, batch ? "samples" : "sample")) {
    refuse(bad->why, bad->detail);
    return false;
  }
  // A batch is admitted whole or not at all: the first bad response refuses the message,
  // naming its position, and nothing of it reaches the sample plane.
  std::vector<const nlohmann::json*> items;
  if (!batch) {
    items.push_back(&msg);
  } else {
    const size_t most = std::min<size_t>(size_t(lease_.group_size) * lease_.groups.size(),
                                         opts_.max_samples_per_message);
    auto it = msg.find("samples");
    if (it == msg.end() || !it->is_array() || it->empty() || it->size() > most) {
      refuse(refusal::malformed, "samples: expected a non-empty list of at most " +
                                     std::to_string(most) +
                                     " responses (the lease's, at most a message's)");
      return false;
    }
    for (const auto& item : *it) items.push_back(&item);
  }
  std::set<std::pair<uint32_t, uint32_t>> taken;  // this message's (group index, index)
  for (size_t i = 0; i < items.size(); ++i) {
    accepted_sample a;
    auto bad = items[i]->is_object()
                   ? check_response(*items[i], taken, a)
                   : std::optional<bad_sample>(bad_sample{refusal::malformed, "not an object"});
    if (bad) {
      refuse(bad->why, batch ? "samples[" + std::to_string(i) + "]: " + bad->detail +
                                   " (the whole message is refused)"
                             : bad->detail);
      out.clear();
      return false;
    }
    taken.insert({a.group_index, a.index_in_group});
    out.push_back(std::move(a));
  }
  submitted_.insert(taken.begin(), taken.end());
  return true;
}

result<rollout_event> rollout_session::next(int64_t wait_ms) {
  if (!link_.running()) return error(errc::peer_dead, "rollout worker: " + link_.last_death());
  const int64_t deadline = now_ms() + wait_ms;
  for (;;) {
    const int64_t left = deadline - now_ms();
    auto got = link_.channel().receive(left > 0 ? left : 0);
    if (!got) {
      if (got.err().code == errc::malformed_message) {
        refuse(refusal::malformed, got.err().message);
        continue;
      }
      return lost(got.err().to_string()).err();
    }
    if (!*got) return rollout_event{};
    const auto& msg = **got;
    auto c = check_envelope(msg, {"sample", "samples", "lease_done", "give_back", "weights"});
    if (!c.ok) {
      refuse(c.why, c.detail);
      continue;
    }
    if (c.type == "weights") {
      if (auto st = answer_weights(msg); !st) return st.err();
      continue;
    }
    if (rank_ > 0) {  // sample, samples, lease_done, give_back: rank 0's to send
      refuse(refusal::not_rank_zero,
             c.type + " from rollout group rank " + std::to_string(rank_) +
                 ": only rank 0 submits and ends the group's leases (the other ranks generate "
                 "with it and hand their rows to rank 0)");
      continue;
    }
    rollout_event ev;
    if (c.type == "sample" || c.type == "samples") {
      ev.batch = c.type == "samples";
      if (!check_submission(msg, ev.batch, ev.samples)) continue;
      accepted_ += ev.samples.size();
      ev.kind = rollout_event_kind::samples;
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

status rollout_session::answer_weights(const nlohmann::json& msg) {
  uint64_t version = 0;
  std::string d;
  if (!read_u64(msg, "version", version, d)) {
    refuse(refusal::malformed, d);
    return {};
  }
  // Only the version the lease in hand names: the one its samples are generated with. A
  // group's rank > 0 holds no lease here (rank 0's node does): any version its feed serves.
  if (rank_ == 0 && (!has_lease_ || version != lease_.policy_version)) {
    refuse(refusal::malformed,
           "weights of version " + std::to_string(version) + ": the lease in hand names " +
               (has_lease_ ? "version " + std::to_string(lease_.policy_version) : "none"));
    return {};
  }
  const bool refetch = msg.value("refetch", false);
  auto got = opts_.weights
                 ? opts_.weights(version, refetch)
                 : result<nlohmann::json>(error(errc::not_found, "this node offers no weights"));
  auto m = frame(got ? "weights_ready" : "weights_error");
  m["version"] = version;
  if (got) {
    for (const auto& [k, v] : got->items()) m[k] = v;
    ++weights_served_;
  } else {
    m["error"] = got.err().to_string();
  }
  if (refetch) ++weights_refetched_;
  if (auto st = link_.channel().send(m, 5000); !st) return lost("weights: " + st.err().to_string());
  return {};
}

status rollout_session::serve_member(const std::function<bool()>& stop) {
  if (rank_ == 0)
    return error(errc::internal, "rollout_session::serve_member: rank 0's session takes leases");
  if (auto st = link_.ensure_started(); !st) return st;
  while (!stop()) {
    auto ev = next(50);  // answers weights, refuses submissions; never an event on rank > 0
    if (!ev) return ev.err();
  }
  return {};
}

status rollout_session::ack(const rollout_event& ev) {
  if (!link_.running()) return error(errc::peer_dead, "rollout worker: " + link_.last_death());
  auto m = frame(ev.batch ? "samples_ack" : "sample_ack");
  m["unit"] = lease_.unit;
  m["attempt"] = lease_.attempt;
  if (ev.batch) {
    m["count"] = ev.samples.size();
  } else {
    m["group_id"] = lease_.groups[ev.samples.at(0).group_index].first;
    m["index"] = ev.samples.at(0).index_in_group;
  }
  if (auto st = link_.channel().send(m, 5000); !st)
    return lost("sample ack: " + st.err().to_string());
  return {};
}

status rollout_session::notice(int64_t deadline_unix_ms, const std::string& reason) {
  if (!link_.running()) return error(errc::peer_dead, "rollout worker: " + link_.last_death());
  if (noticed_at_start_ == link_.starts()) return {};  // this process has it already
  noticed_at_start_ = link_.starts();
  auto m = frame("notice");
  m["deadline_unix_ms"] = deadline_unix_ms;
  m["reason"] = reason;
  if (auto st = link_.channel().send(m, 1000); !st) return lost("notice: " + st.err().to_string());
  return {};
}

status rollout_session::close(const std::string& st, const std::string& reason) {
  if (!has_lease_) return {};
  past_attempts_[lease_.unit] = lease_.attempt;
  has_lease_ = false;
  if (!link_.running()) return {};
  auto m = frame("lease_closed");
  m["unit"] = lease_.unit;
  m["attempt"] = lease_.attempt;
  m["status"] = st;
  m["reason"] = reason;
  if (auto s = link_.channel().send(m, 1000); !s)
    return lost("lease close: " + s.err().to_string());
  return {};
}

nlohmann::json rollout_session::stats() const {
  return {{"samples_accepted", accepted_},
          {"refused", refused_},
          {"worker_starts", link_.starts()},
          {"worker_deaths", link_.deaths()},
          {"leases_offered", offered_},
          {"weights_served", weights_served_},
          {"weights_refetched", weights_refetched_}};
}

}  // namespace moerl::workers
