#include "actors/node_roles.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <optional>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/atoms.h"
#include "actors/interruption.h"
#include "actors/lease_batch.h"
#include "actors/modpow_work.h"
#include "actors/trainer_check.h"
#include "actors/wait_clock.h"
#include "actors/wire_pack.h"
#include "common/log.h"
#include "messages/admin.h"
#include "messages/weights.h"
#include "messages/work.h"

namespace moerl::actors {
struct trainer_share {
  std::vector<messages::sample> samples;
};
}  // namespace moerl::actors

// A batch share only travels between ranks of one process, never over the network.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const moerl::actors::trainer_share>)

namespace moerl::actors {
namespace {

using namespace std::chrono;
using ms = milliseconds;
using share_ptr = std::shared_ptr<const trainer_share>;

int64_t steady_ms() { return duration_cast<ms>(steady_clock::now().time_since_epoch()).count(); }

// Counts a role loop as alive for the agent's drain completion check.
struct running_guard {
  std::atomic<uint32_t>& n;
  explicit running_guard(std::atomic<uint32_t>& c) : n(c) { ++n; }
  ~running_guard() { --n; }
};

// Handles what is in the mailbox (waiting up to `wait` for something); false when the loop
// must end (shutdown_atom or the node is stopping).
bool mailbox_ok(caf::blocking_actor* self, node_context& ctx, ms wait) {
  bool keep = true;
  self->receive([&](shutdown_atom) { keep = false; }, caf::after(wait) >> [] {});
  return keep && !ctx.stopping.load();
}

// One request to the coordinator with the configured timeout. "" or payload bytes on
// success; a reply that is an encoded moerl::error becomes that error.
template <class... Ts>
result<std::string> call_coordinator(caf::blocking_actor* self, node_context& ctx, Ts&&... xs) {
  auto coord = ctx.coordinator();
  if (!coord) return error(errc::peer_dead, "not connected to the coordinator");
  result<std::string> out = error(errc::timeout, "no reply");
  self->request(coord, ms(ctx.cp.request_timeout_ms), std::forward<Ts>(xs)...)
      .receive([&](std::string& r) { out = std::move(r); },
               [&](caf::error& e) { out = error(errc::peer_dead, "coordinator: " + self->system().render(e)); });
  if (out && !out->empty()) {
    auto k = messages::peek_kind(out->data(), out->size());
    if (k && *k == messages::kind::error) {
      auto e = messages::decode<messages::wire_error>(*out);
      return e ? e->value : e.err();
    }
  }
  return out;
}

// Live nodes of a role with their endpoints, from the coordinator's admin `nodes` view. An
// error when the coordinator did not answer (it may be restarting): callers must not read
// "no answer" as "no such node", or a coordinator restart makes every shard look gone.
result<std::vector<std::string>> discover(caf::blocking_actor* self, node_context& ctx, const std::string& role) {
  messages::admin_request req;
  req.token = ctx.cfg.get_string("console.token");
  req.command = "nodes";
  auto raw = call_coordinator(self, ctx, admin_atom::value, messages::encode(req));
  if (!raw) return raw.err();
  auto rep = messages::decode<messages::admin_reply>(*raw);
  if (!rep) return rep.err();
  if (!rep->ok) return error(errc::internal, "coordinator refused `nodes`: " + rep->body_json);
  auto j = nlohmann::json::parse(rep->body_json, nullptr, false);
  if (!j.is_array()) return error(errc::malformed_message, "coordinator's `nodes` reply is not a JSON array");
  std::vector<std::string> out;
  for (auto& n : j)
    if (n.value("role", "") == role && n.value("state", "") == "running" && !n.value("endpoint", "").empty())
      out.push_back(n["endpoint"].get<std::string>());
  return out;
}

// True only when the coordinator answered and `endpoint` is not among the live nodes of `role`.
bool known_gone(caf::blocking_actor* self, node_context& ctx, const std::string& role, const std::string& endpoint) {
  auto alive = discover(self, ctx, role);
  return alive && std::find(alive->begin(), alive->end(), endpoint) == alive->end();
}

// Microseconds since `t0`, saturated to the sample message's 32-bit timing fields.
uint32_t micros_since(std::chrono::steady_clock::time_point t0) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<uint32_t>(std::clamp<int64_t>(us, 0, UINT32_MAX));
}

// ---- rollout ------------------------------------------------------------------------------

class rollout_worker {
 public:
  rollout_worker(caf::blocking_actor* self, std::shared_ptr<node_context> ctx, uint32_t k)
      : self_(self), ctx_(std::move(ctx)), worker_(ctx_->id + "/" + std::to_string(k)), log_(logger("rollout")) {}

  void run() {
    running_guard g(ctx_->workers_running);
    auto w = ctx_->running_job->make_rollout_work();
    auto r = ctx_->running_job->make_reward();
    if (!w || !r) {
      self_->fail_state(caf::make_error(caf::sec::runtime_error, (!w ? w.err() : r.err()).to_string()));
      return;
    }
    work_ = std::move(*w);
    reward_ = std::move(*r);
    lease_batch_ = static_cast<uint32_t>(std::clamp<int64_t>(ctx_->cfg.get_int("actors.lease_batch"), 1, 4096));
    int64_t last_err_log = 0;
    while (mailbox_ok(self_, *ctx_, ms(0))) {
      if (ctx_->draining()) break;  // stop leasing; exit normally (transient: no restart)
      if (queue_.empty()) {
        auto got = fetch_leases();
        if (!got) {
          auto c = got.err().code;
          if (c != errc::not_found && c != errc::capacity_exceeded && c != errc::shutting_down &&
              steady_ms() - last_err_log > 2000) {
            log_->warn("{}: lease failed: {}", worker_, got.err().to_string());
            last_err_log = steady_ms();
          }
          if (!mailbox_ok(self_, *ctx_, ms(c == errc::not_found ? 20 : 200))) break;  // wait for work
          continue;
        }
        queue_.assign(got->begin(), got->end());
      }
      messages::lease l = std::move(queue_.front());
      queue_.pop_front();
      // Expired while it waited in the queue: the ledger re-opens it (lease_expired) and
      // fences its attempt, so running it would only make samples the shard refuses.
      if (static_cast<uint64_t>(unix_now_ms()) >= l.deadline_unix_ms) {
        log_->warn("{}: lease of unit {} attempt {} expired in the local queue; skipped", worker_, l.unit.id, l.attempt);
        continue;
      }
      if (!run_unit(l) && !mailbox_ok(self_, *ctx_, ms(200))) break;  // a failing unit: don't spin
    }
    give_back_queued();
  }

 private:
  // Leases for this worker: one Cap'n Proto lease per request when actors.lease_batch is 1
  // (lease_atom), else up to that many in one lease batch (leases_atom, lease_batch.h).
  result<std::vector<messages::lease>> fetch_leases() {
    messages::lease_request req;
    req.worker = worker_;
    req.policy_version = ctx_->policy_version.load();
    req.max_units = lease_batch_;
    if (lease_batch_ == 1) {
      auto raw = call_coordinator(self_, *ctx_, lease_atom::value, messages::encode(req));
      if (!raw) return raw.err();
      auto l = messages::decode<messages::lease>(*raw);
      if (!l) return error(l.err().code, "undecodable lease: " + l.err().message);
      return std::vector<messages::lease>{std::move(*l)};
    }
    auto raw = call_coordinator(self_, *ctx_, leases_atom::value, messages::encode(req));
    if (!raw) return raw.err();
    return decode_lease_batch(*raw);
  }

  // Leases fetched but not started go back in one message (drain, stop): pending again at
  // once instead of at their deadline. If the coordinator does not answer they still expire.
  void give_back_queued() {
    if (queue_.empty()) return;
    lease_ids ids;
    for (const auto& l : queue_) ids.emplace_back(l.unit.id, l.attempt);
    log_->info("{}: giving back {} unstarted lease(s)", worker_, ids.size());
    auto r = call_coordinator(self_, *ctx_, giveback_atom::value, worker_, pack_lease_ids(ids));
    if (!r) log_->warn("{}: give back of {} unstarted lease(s): {}", worker_, ids.size(), r.err().to_string());
    if (ctx_->draining()) ctx_->units_returned += static_cast<uint32_t>(ids.size());
    queue_.clear();
  }

  // False when the unit failed (not merely returned).
  bool run_unit(const messages::lease& l) {
    ++ctx_->active_units;
    const uint32_t G = l.unit.samples_per_group;
    const uint32_t n = static_cast<uint32_t>(l.unit.group_ids.size()) * G;
    uint32_t seq = 0;
    std::string fail;
    bool returned = false;
    int64_t t0 = steady_ms();
    for (uint32_t gi = 0; gi < l.unit.group_ids.size() && fail.empty() && !returned; ++gi) {
      auto prompt_or = ctx_->running_job->prompt(l.unit.group_ids[gi]);
      if (!prompt_or) { fail = prompt_or.err().to_string(); break; }
      const auto& prompt = *prompt_or;
      for (uint32_t i = 0; i < G; ++i) {
        if (ctx_->stopping) { returned = true; break; }
        if (ctx_->draining()) {
          // Finish the unit only if it fits before the drain deadline, judged by this
          // worker's measured cost per sample; otherwise give it back now.
          double per = seq ? double(steady_ms() - t0) / seq : avg_sample_ms_;
          if (unix_now_ms() + static_cast<int64_t>(per * (n - seq)) > ctx_->drain_by_ms.load()) {
            returned = true;
            break;
          }
        }
        const auto t_gen = std::chrono::steady_clock::now();
        auto gs = work_->generate(prompt, gi, i, l.policy_version);
        if (!gs) { fail = gs.err().to_string(); break; }
        const uint32_t generate_us = micros_since(t_gen);
        messages::sample s;
        s.work_unit = l.unit.id;
        s.attempt = l.attempt;
        s.seq = seq;
        s.policy_version = l.policy_version;
        s.group_id = l.unit.group_ids[gi];
        s.index_in_group = i;
        s.prompt_tokens = std::move(gs->prompt);
        s.tokens = std::move(gs->tokens);
        s.logprobs = std::move(gs->logprobs);
        s.worker = worker_;
        s.generate_us = generate_us;
        if (auto st = deliver(s, l.shard_endpoint, l.deadline_unix_ms); !st) { fail = st.err().to_string(); break; }
        ++seq;
      }
    }
    if (seq) avg_sample_ms_ = 0.7 * avg_sample_ms_ + 0.3 * double(steady_ms() - t0) / seq;
    messages::unit_report rep;
    rep.unit_id = l.unit.id;
    rep.attempt = l.attempt;
    rep.worker = worker_;
    rep.samples_produced = seq;
    if (fail.empty() && !returned) {
      rep.status = messages::unit_status::finished;
    } else {
      rep.status = fail.empty() ? messages::unit_status::returned : messages::unit_status::failed;
      rep.reason = fail.empty() ? "drain: does not fit before the deadline" : fail;
      if (!fail.empty()) log_->warn("{}: unit {} failed: {}", worker_, l.unit.id, fail);
    }
    auto r = call_coordinator(self_, *ctx_, report_atom::value, messages::encode(rep));
    if (!r) log_->warn("{}: report of unit {} attempt {}: {}", worker_, l.unit.id, l.attempt, r.err().to_string());
    if (ctx_->draining()) (returned || !fail.empty() ? ctx_->units_returned : ctx_->units_finished)++;
    --ctx_->active_units;
    return fail.empty();
  }

  // Through a reward node when one is alive; otherwise scored here and sent to the shard.
  status deliver(messages::sample& s, const std::string& shard_ep, uint64_t lease_deadline_unix_ms) {
    if (steady_ms() >= next_discovery_) {
      auto found = discover(self_, *ctx_, "reward");
      next_discovery_ = steady_ms() + 2000;
      if (found && *found != reward_eps_) {
        const auto& eps = *found;
        reward_eps_ = eps;
        push_.reset();
        if (!eps.empty()) {
          auto p = reward_push::connect(ctx_->zmq, eps, 1000);
          if (p) push_ = std::move(*p);
          else log_->warn("{}: reward hop: {}", worker_, p.err().to_string());
        }
      }
    }
    if (push_) {
      auto st = push_->send(shard_ep, messages::encode(s));
      if (st) return st;
      log_->warn("{}: no reward node took a sample ({}); scoring locally", worker_, st.err().message);
      push_.reset();
      reward_eps_.clear();
      next_discovery_ = steady_ms() + 2000;
    } else if (!warned_local_) {
      log_->warn("{}: no reward node alive: scoring in the rollout process", worker_);
      warned_local_ = true;
    }
    const auto t_score = std::chrono::steady_clock::now();
    auto score = reward_->score(s.prompt_tokens, s.tokens);
    if (!score) return score.err();
    s.reward_us = micros_since(t_score);
    s.reward = *score;
    s.rewarded = true;
    auto& p = direct_[shard_ep];
    if (!p) {
      auto c = ledger::sample_producer::connect(ctx_->zmq, shard_ep, worker_);
      if (!c) return c.err();
      p = std::move(*c);
    }
    int64_t next_check = steady_ms() + 1000;
    for (;;) {
      auto st = p->try_send(s);
      if (st) return st;
      if (st.err().code != errc::capacity_exceeded) return st;
      if (ctx_->stopping) return error(errc::shutting_down, "node stopping");
      // No credit: a slow trainer (wait) or a dead shard (give up; the ledger has expired
      // the lease and re-opens the unit). A dead peer never answers, so ask the coordinator.
      if (static_cast<uint64_t>(unix_now_ms()) > lease_deadline_unix_ms)
        return error(errc::timeout, "no credit from shard " + shard_ep + " before the lease deadline");
      if (steady_ms() > next_check) {
        next_check = steady_ms() + 1000;
        if (known_gone(self_, *ctx_, "buffer", shard_ep)) {
          direct_.erase(shard_ep);
          return error(errc::peer_dead, "shard " + shard_ep + " is gone");
        }
      }
      if (auto pst = p->poll(50); !pst) return pst;  // wait for the shard's credit
    }
  }

  caf::blocking_actor* self_;
  std::shared_ptr<node_context> ctx_;
  std::string worker_;
  std::shared_ptr<spdlog::logger> log_;
  std::unique_ptr<rollout_work> work_;
  std::unique_ptr<reward_function> reward_;
  double avg_sample_ms_ = 1.0;
  std::unique_ptr<reward_push> push_;
  std::vector<std::string> reward_eps_;
  int64_t next_discovery_ = 0;
  bool warned_local_ = false;
  std::map<std::string, std::unique_ptr<ledger::sample_producer>> direct_;
  uint32_t lease_batch_ = 1;                // actors.lease_batch
  std::deque<messages::lease> queue_;       // leased, not started; worked in order
};

// ---- reward -------------------------------------------------------------------------------

void reward_loop(caf::blocking_actor* self, std::shared_ptr<node_context> ctx) {
  running_guard g(ctx->workers_running);
  auto log = logger("reward");
  auto verifier_or = ctx->running_job->make_reward();
  if (!verifier_or) {
    self->fail_state(caf::make_error(caf::sec::runtime_error, verifier_or.err().to_string()));
    return;
  }
  const reward_function& verifier = **verifier_or;
  std::optional<std::pair<std::string, messages::sample>> pending;
  uint64_t scored = 0, malformed = 0;
  int64_t idle_since = steady_ms(), last_stats = 0, blocked_since = 0;
  // Shards found gone, by endpoint -> when to look again: later samples for them are dropped
  // at once instead of each waiting for credit that never comes (which would hold up every
  // other unit's samples behind them). Not for ever: right after a coordinator restart a
  // live shard is missing from `nodes` until it has re-joined, and a shard wrongly written
  // off would turn every later unit it holds into an expired lease. A replacement shard
  // binds a new endpoint.
  constexpr int64_t kLookAgainMs = 5000;
  std::map<std::string, int64_t> gone_shards;
  uint64_t dropped_for_gone = 0;
  while (mailbox_ok(self, *ctx, ms(0))) {
    if (steady_ms() - last_stats > 1000) {
      last_stats = steady_ms();
      nlohmann::json st{{"scored", scored}, {"malformed", malformed}, {"bad_frames", ctx->pull->num_bad_frames()},
                        {"dropped_for_gone_shards", dropped_for_gone}};
      if (auto c = ctx->coordinator()) self->send(c, stats_atom::value, ctx->id, st.dump());
    }
    if (!pending) {
      auto got = ctx->pull->poll(20);
      if (!got) {
        log->error("reward pull: {}", got.err().to_string());
        continue;
      }
      if (!*got) {
        if (ctx->draining() && steady_ms() - idle_since > 300) return;  // flushed
        continue;
      }
      idle_since = steady_ms();
      auto s = messages::decode<messages::sample>((*got)->second);
      if (!s) { ++malformed; continue; }
      const auto t_score = std::chrono::steady_clock::now();
      auto r = verifier.score(s->prompt_tokens, s->tokens);
      s->reward_us = micros_since(t_score);
      if (!r) {
        // Never forwarded: its attempt stays incomplete and the lease expires.
        ++malformed;
        log->warn("sample of unit {} seq {} not scorable: {}", s->work_unit, s->seq, r.err().message);
        continue;
      }
      s->reward = *r;
      s->rewarded = true;
      ++scored;
      pending.emplace((*got)->first, std::move(*s));
    }
    if (auto g = gone_shards.find(pending->first); g != gone_shards.end()) {
      if (steady_ms() < g->second) {
        ++dropped_for_gone;  // its unit's lease is expired or will be: the unit is re-run
        pending.reset();
        continue;
      }
      gone_shards.erase(g);  // look again: this sample waits for credit, then is re-checked
    }
    auto& p = ctx->producers[pending->first];
    if (!p) {
      auto c = ledger::sample_producer::connect(ctx->zmq, pending->first, ctx->name);
      if (!c) {
        log->error("connect to shard {}: {}", pending->first, c.err().to_string());
        pending.reset();
        continue;
      }
      p = std::move(*c);
    }
    auto st = p->try_send(pending->second);
    if (st) {
      pending.reset();
      blocked_since = 0;
    } else if (st.err().code == errc::capacity_exceeded) {
      // Wait for credit, but not on a dead shard: its unit's lease is expired anyway.
      if (!blocked_since) blocked_since = steady_ms();
      if (steady_ms() - blocked_since > 1000) {
        blocked_since = steady_ms();
        if (known_gone(self, *ctx, "buffer", pending->first)) {
          log->warn("shard {} is gone: dropping its samples for {} s (first: unit {})", pending->first,
                    kLookAgainMs / 1000, pending->second.work_unit);
          gone_shards[pending->first] = steady_ms() + kLookAgainMs;
          ctx->producers.erase(pending->first);
          pending.reset();
          continue;
        }
      }
      (void)p->poll(20);
    } else {
      log->error("forward to {}: {}", pending->first, st.err().to_string());
      pending.reset();
    }
  }
}

// ---- buffer shard -------------------------------------------------------------------------

void shard_loop(caf::blocking_actor* self, std::shared_ptr<node_context> ctx) {
  running_guard g(ctx->workers_running);
  auto log = logger("buffer");
  auto& svc = *ctx->shard;
  std::deque<ledger::shard_ack> acks;
  std::deque<ledger::consumption> consumed;
  int64_t last_stats = 0, last_err = 0;
  while (mailbox_ok(self, *ctx, ms(0))) {
    {
      std::lock_guard<std::mutex> lk(ctx->events_mu);
      for (auto& e : ctx->events) svc.shard().apply(e);
      ctx->events.clear();
    }
    if (ctx->policy_version > svc.shard().policy_version()) svc.shard().set_policy_version(ctx->policy_version);
    auto r = svc.pump(10);
    if (!r && steady_ms() - last_err > 2000) {
      log->error("shard pump: {}", r.err().to_string());
      last_err = steady_ms();
    }
    for (auto& a : svc.take_acks()) acks.push_back(std::move(a));
    for (auto& c : svc.take_consumed()) consumed.push_back(c);
    // Acks and consumption must reach the ledger: keep them until the coordinator answered.
    while (!acks.empty()) {
      auto& a = acks.front();
      auto res = call_coordinator(self, *ctx, ack_atom::value, a.unit, a.attempt, a.shard,
                                  pack_u64s(a.accepted_groups), pack_u64s(a.stale_groups));
      if (!res && (res.err().code == errc::peer_dead || res.err().code == errc::timeout)) break;
      if (!res) log->warn("ack of unit {} attempt {} refused: {}", a.unit, a.attempt, res.err().message);
      acks.pop_front();
    }
    while (!consumed.empty()) {
      auto& c = consumed.front();
      auto res = call_coordinator(self, *ctx, consumed_atom::value, c.unit, c.attempt, c.group, c.num_samples,
                                  c.handout);
      if (!res && (res.err().code == errc::peer_dead || res.err().code == errc::timeout)) break;
      if (!res) log->error("consumption of unit {} group {} refused: {}", c.unit, c.group, res.err().message);
      consumed.pop_front();
    }
    if (steady_ms() - last_stats > 500) {
      last_stats = steady_ms();
      auto st = svc.shard().stats().to_json();
      st["ready_groups"] = svc.shard().num_ready_groups();
      st["free_samples"] = svc.shard().free_samples();
      st["capacity_samples"] = svc.shard().options().capacity_samples;
      st["credits_outstanding"] = svc.credits_outstanding();
      if (auto c = ctx->coordinator()) self->send(c, stats_atom::value, ctx->id, st.dump());
    }
    if (ctx->draining() && acks.empty() && consumed.empty() &&
        (svc.shard().stats().resident_samples == 0 || unix_now_ms() > ctx->drain_by_ms.load()))
      return;  // flushed (or out of time: the coordinator re-opens what this shard held)
  }
}

// ---- trainer ------------------------------------------------------------------------------

void register_rank(node_context& ctx, uint32_t r, caf::actor a) {
  std::lock_guard<std::mutex> g(ctx.ranks_mu);
  ctx.ranks[r] = std::move(a);
}

void trainer_rank_loop(caf::blocking_actor* self, std::shared_ptr<node_context> ctx, uint32_t rank) {
  running_guard g(ctx->workers_running);
  register_rank(*ctx, rank, caf::actor_cast<caf::actor>(self));
  uint32_t rounds = static_cast<uint32_t>(ctx->cfg.get_int("actors.work_rounds"));
  bool keep = true;
  while (keep && !ctx->stopping && !ctx->draining()) {
    self->receive(
        [&](shutdown_atom) { keep = false; },
        [&](work_atom, share_ptr share) -> std::string {
          auto t = check_and_score(share->samples, rounds);
          return std::to_string(t.verified) + " " + std::to_string(t.bad) + " " + std::to_string(t.groups) + " " +
                 std::to_string(t.sum_abs_advantage);
        },
        caf::after(ms(100)) >> [] {});
  }
}

void trainer_driver_loop(caf::blocking_actor* self, std::shared_ptr<node_context> ctx, uint32_t num_ranks) {
  running_guard g(ctx->workers_running);
  register_rank(*ctx, 0, caf::actor_cast<caf::actor>(self));
  auto log = logger("trainer");
  auto rounds = static_cast<uint32_t>(ctx->cfg.get_int("actors.work_rounds"));
  auto batch_groups = static_cast<uint32_t>(ctx->cfg.get_int("actors.trainer_batch_groups"));
  uint64_t groups_per_iteration = static_cast<uint64_t>(ctx->cfg.get_int("actors.units_per_iteration")) *
                                  static_cast<uint64_t>(ctx->cfg.get_int("actors.groups_per_unit"));
  struct source {
    std::unique_ptr<ledger::batch_consumer> c;
    bool outstanding = false;
  };
  std::map<std::string, source> sources;
  int64_t next_refresh = 0, last_stats = 0;
  check_totals total;
  uint64_t batches = 0, content_hash = 1469598103934665603ull;
  // The job's learning step, if it has one; it lives in the node context so a one_for_all
  // restart of the ranks keeps the optimiser state and the groups it holds.
  if (!ctx->trainer_state) {
    auto made = ctx->running_job->make_trainer();
    if (!made) {
      self->fail_state(caf::make_error(caf::sec::runtime_error, made.err().to_string()));
      return;
    }
    ctx->trainer_state = std::shared_ptr<trainer_step>(std::move(*made));
    // A step resumed from a checkpoint starts at its version: announce it before any
    // rollout generates with the initial weights.
    if (ctx->trainer_state && ctx->trainer_state->version() > ctx->policy_version) {
      ctx->policy_version = ctx->trainer_state->version();
      messages::weight_manifest m;
      m.version = ctx->policy_version;
      if (auto c = ctx->coordinator()) self->send(c, version_atom::value, m.version, messages::encode(m));
    }
  }
  trainer_step* job_step = ctx->trainer_state.get();
  const int64_t flush_ms = ctx->cfg.get_int("actors.trainer_flush_ms");
  int64_t last_batch = steady_ms();
  bool flushed = true;
  // Stall: time with no batch in hand, from wanting one to getting one (`stall_s` in the
  // stats). Groups a job step holds back for a full iteration do not count as work in
  // hand: the step cannot train until more arrive. Per incarnation, like the counters.
  wait_clock stalled;
  while (mailbox_ok(self, *ctx, ms(0))) {
    if (ctx->draining()) return;  // nothing is held between batches: leave
    stalled.start_waiting(steady_ms());
    if (steady_ms() >= next_refresh) {
      next_refresh = steady_ms() + 1000;
      auto found = discover(self, *ctx, "buffer");
      if (!found) continue;  // the coordinator did not answer: keep the shards we have
      const auto& eps = *found;
      for (auto& e : eps)
        if (!sources.count(e)) {
          auto c = ledger::batch_consumer::connect(ctx->zmq, e, ctx->name);
          if (c) sources[e].c = std::move(*c);
          else log->warn("trainer cannot reach shard {}: {}", e, c.err().to_string());
        }
      for (auto it = sources.begin(); it != sources.end();)  // shards that left
        it = std::find(eps.begin(), eps.end(), it->first) == eps.end() ? sources.erase(it) : std::next(it);
    }
    if (sources.empty()) {
      if (!mailbox_ok(self, *ctx, ms(100))) return;
      continue;
    }
    for (auto& [ep, src] : sources) {
      stalled.start_waiting(steady_ms());  // after the previous source's batch was worked on
      if (!src.outstanding) {
        if (auto st = src.c->request(batch_groups); !st) continue;
        src.outstanding = true;
      }
      auto b = src.c->poll(static_cast<int>(10 / sources.size()) + 1);
      if (!b || !*b) continue;
      src.outstanding = false;
      auto& batch = **b;
      if (batch.samples.empty()) continue;
      stalled.stop_waiting(steady_ms());
      if (job_step) {
        last_batch = steady_ms();
        flushed = false;
        auto res = job_step->train(batch.samples);
        if (!res) {
          // A failed step is a bug or a broken group: restart the trainer group.
          self->fail_state(caf::make_error(caf::sec::runtime_error, "train step: " + res.err().to_string()));
          return;
        }
        ++batches;
        total.groups += res->groups;
        total.bad += res->bad;
        total.verified += batch.samples.size() - res->bad;
        ctx->trained_groups += res->groups;
        if (res->new_version && res->manifest.version > ctx->policy_version) {
          ctx->policy_version = res->manifest.version;
          if (auto c = ctx->coordinator())
            self->send(c, version_atom::value, res->manifest.version, messages::encode(res->manifest));
          log->info("policy version {} (content hash {})", res->manifest.version, res->manifest.content_hash);
          last_stats = 0;  // report the new version's figures now, not at the next tick
        }
        continue;
      }
      // Deal whole groups to ranks: group j of the batch goes to rank j % num_ranks.
      std::map<uint64_t, uint32_t> owner;
      std::vector<std::shared_ptr<trainer_share>> shares(num_ranks);
      for (auto& s : shares) s = std::make_shared<trainer_share>();
      for (auto& s : batch.samples) {
        auto it = owner.emplace(s.group_id, static_cast<uint32_t>(owner.size() % num_ranks)).first;
        shares[it->second]->samples.push_back(s);
        for (uint32_t t : s.tokens) content_hash = (content_hash ^ t) * 1099511628211ull;
      }
      auto mine = check_and_score(shares[0]->samples, rounds);
      for (uint32_t r = 1; r < num_ranks; ++r) {
        caf::actor rank;
        {
          std::lock_guard<std::mutex> lk(ctx->ranks_mu);
          rank = ctx->ranks[r];
        }
        bool ok = false;
        if (rank)
          self->request(rank, seconds(10), work_atom::value, share_ptr(shares[r]))
              .receive([&](std::string& res) {
                         check_totals t;
                         std::sscanf(res.c_str(), "%lu %lu %lu %lf", &t.verified, &t.bad, &t.groups, &t.sum_abs_advantage);
                         mine.verified += t.verified;
                         mine.bad += t.bad;
                         mine.groups += t.groups;
                         mine.sum_abs_advantage += t.sum_abs_advantage;
                         ok = true;
                       },
                       [&](caf::error&) {});
        if (!ok) {
          // A rank is gone mid-step: the group is synchronous, so the whole group restarts
          // (one_for_all) rather than continuing with a missing rank.
          self->fail_state(caf::make_error(caf::sec::runtime_error, "trainer rank " + std::to_string(r) + " did not answer"));
          return;
        }
      }
      if (mine.bad) log->error("batch {}: {} sample(s) failed verification", batch.batch_id, mine.bad);
      total.verified += mine.verified;
      total.bad += mine.bad;
      total.groups += mine.groups;
      total.sum_abs_advantage += mine.sum_abs_advantage;
      ++batches;
      uint64_t trained = (ctx->trained_groups += mine.groups);
      uint64_t version = trained / groups_per_iteration;
      if (version > ctx->policy_version) {
        ctx->policy_version = version;
        messages::weight_manifest m;
        m.version = version;
        char hex[17];
        std::snprintf(hex, sizeof hex, "%016lx", content_hash);
        m.content_hash = hex;
        m.created_unix_ms = static_cast<uint64_t>(unix_now_ms());
        if (auto c = ctx->coordinator()) self->send(c, version_atom::value, version, messages::encode(m));
        log->info("policy version {} (trained groups {})", version, trained);
      }
    }
    if (job_step && !flushed && steady_ms() - last_batch > flush_ms) {
      flushed = true;
      stalled.stop_waiting(steady_ms());  // training on the held groups is work, not waiting
      auto res = job_step->train({});
      stalled.start_waiting(steady_ms());
      if (!res) {
        self->fail_state(caf::make_error(caf::sec::runtime_error, "train step (flush): " + res.err().to_string()));
        return;
      }
      if (res->new_version && res->manifest.version > ctx->policy_version) {
        ctx->policy_version = res->manifest.version;
        if (auto c = ctx->coordinator())
          self->send(c, version_atom::value, res->manifest.version, messages::encode(res->manifest));
        log->info("policy version {} from a flush of held groups", res->manifest.version);
        last_stats = 0;
      }
    }
    if (steady_ms() - last_stats > 1000) {
      last_stats = steady_ms();
      nlohmann::json st{{"batches", batches}, {"groups", total.groups}, {"samples_verified", total.verified},
                        {"samples_bad", total.bad}, {"policy_version", ctx->policy_version.load()},
                        {"stall_s", stalled.waited_s(steady_ms())},
                        {"mean_abs_advantage", total.verified ? total.sum_abs_advantage / double(total.verified + total.bad) : 0.0}};
      if (job_step) st["job"] = job_step->stats();
      if (auto c = ctx->coordinator()) {
        self->send(c, stats_atom::value, ctx->id, st.dump());
        // Re-announced each time: a restarted coordinator learns the version again.
        if (ctx->policy_version > 0) {
          messages::weight_manifest m;
          m.version = ctx->policy_version;
          self->send(c, version_atom::value, m.version, messages::encode(m));
        }
      }
    }
  }
}

// ---- weights and env ----------------------------------------------------------------------

void weights_loop(caf::blocking_actor* self, std::shared_ptr<node_context> ctx) {
  running_guard g(ctx->workers_running);
  uint64_t served = 0, seen = 0;
  bool keep = true;
  while (keep && !ctx->stopping && !ctx->draining()) {
    self->receive([&](shutdown_atom) { keep = false; },
                  [&](version_atom) -> uint64_t { return ctx->policy_version.load(); },
                  caf::after(ms(200)) >> [] {});
    if (ctx->policy_version != seen) {
      seen = ctx->policy_version;
      ++served;
      logger("weights")->info("serving policy version {}", seen);
      nlohmann::json st{{"version", seen}, {"versions_seen", served}};
      if (auto c = ctx->coordinator()) self->send(c, stats_atom::value, ctx->id, st.dump());
    }
  }
}

void env_loop(caf::blocking_actor* self, std::shared_ptr<node_context> ctx) {
  running_guard g(ctx->workers_running);
  bool keep = true;
  while (keep && !ctx->stopping && !ctx->draining()) {
    self->receive([&](shutdown_atom) { keep = false; },
                  [&](work_atom, uint64_t group) -> std::string {
                    auto p = ctx->running_job->prompt(group);
                    if (!p) return std::string();
                    return pack_u64s(std::vector<uint64_t>(p->begin(), p->end()));
                  },
                  caf::after(ms(200)) >> [] {});
  }
}

}  // namespace

restart_strategy role_strategy(const std::string& role) {
  return role == "trainer" ? restart_strategy::one_for_all : restart_strategy::one_for_one;
}

std::vector<child_spec> role_children(const std::shared_ptr<node_context>& ctx) {
  std::vector<child_spec> kids;
  const auto& role = ctx->role;
  if (role == "rollout") {
    auto n = static_cast<uint32_t>(std::max<int64_t>(1, ctx->cfg.get_int("actors.rollout_workers")));
    for (uint32_t k = 0; k < n; ++k)
      kids.push_back({"rollout-" + std::to_string(k),
                      [ctx, k](caf::actor_system& sys) {
                        return sys.spawn([ctx, k](caf::blocking_actor* self) { rollout_worker(self, ctx, k).run(); });
                      },
                      restart_policy::transient});
  } else if (role == "reward") {
    kids.push_back({"scorer", [ctx](caf::actor_system& sys) {
                      return sys.spawn([ctx](caf::blocking_actor* self) { reward_loop(self, ctx); });
                    }, restart_policy::transient});
  } else if (role == "buffer") {
    kids.push_back({"shard", [ctx](caf::actor_system& sys) {
                      return sys.spawn([ctx](caf::blocking_actor* self) { shard_loop(self, ctx); });
                    }, restart_policy::transient});
  } else if (role == "trainer") {
    auto n = static_cast<uint32_t>(std::max<int64_t>(1, ctx->cfg.get_int("actors.trainer_ranks")));
    kids.push_back({"rank-0", [ctx, n](caf::actor_system& sys) {
                      return sys.spawn([ctx, n](caf::blocking_actor* self) { trainer_driver_loop(self, ctx, n); });
                    }, restart_policy::transient});
    for (uint32_t r = 1; r < n; ++r)
      kids.push_back({"rank-" + std::to_string(r), [ctx, r](caf::actor_system& sys) {
                        return sys.spawn([ctx, r](caf::blocking_actor* self) { trainer_rank_loop(self, ctx, r); });
                      }, restart_policy::transient});
  } else if (role == "weights") {
    kids.push_back({"versions", [ctx](caf::actor_system& sys) {
                      return sys.spawn([ctx](caf::blocking_actor* self) { weights_loop(self, ctx); });
                    }, restart_policy::transient});
  } else if (role == "env") {
    kids.push_back({"prompts", [ctx](caf::actor_system& sys) {
                      return sys.spawn([ctx](caf::blocking_actor* self) { env_loop(self, ctx); });
                    }, restart_policy::transient});
  }
  return kids;
}

}  // namespace moerl::actors
