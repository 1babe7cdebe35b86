// The rollout role: actors.rollout_workers workers, each leasing units from the coordinator
// (one per request, or a batch of actors.lease_batch), generating their samples with the
// job's rollout_work and delivering them through a reward node (or, with none alive,
// scoring them here and sending them to the unit's shard), then reporting the unit.
// A rollout EP group across nodes (rollout.group_size > 1): one model instance over the
// group's member processes, so each node runs one worker, rollout_group_loop: member 0 (the
// leader) leases and reports like any worker, its work driving every member's ranks; the
// other members follow its commands (job.h serve_rollout_member). A member's loss or drain
// dissolves the group, and every member that stays re-joins its next incarnation.
// With rollout.worker (a Python rollout group, python/WORKERS.md "Rollout groups") each member
// runs one worker process instead: member 0's is rank 0, offered the leases exactly as a single
// external worker is; the others' serve_external_rollout_member.
#include <algorithm>
#include <chrono>
#include <deque>
#include <map>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/atoms.h"
#include "actors/group_rounds.h"
#include "actors/internal/node_group_member.h"
#include "actors/internal/role_loops.h"
#include "actors/internal/worker_options.h"
#include "actors/interruption.h"
#include "common/log.h"
#include "env/env_client.h"
#include "ledger/sample_plane.h"
#include "messages/work.h"
#include "workers/rollout_session.h"
#include "workers/version_files.h"
#include "workers/worker_group.h"

namespace moerl::actors {
namespace {

// An external worker told to stop (its channel closed) gets this long to leave by itself.
constexpr int64_t kWorkerStopGraceMs = 1000;
// How long a Python rollout group's members wait for the rendezvous round, and member 0 for
// the stop round.
constexpr int64_t kRendezvousMs = 60000;
constexpr int64_t kStopRoundMs = 5000;

// rollout.worker's session as this node runs it: the worker keys, the job's limits on a
// sample, and weights(v) from the node's feed's verified bytes, as a file in shared memory the
// worker maps (one set of files per node process, shared by its rollout actors).
workers::rollout_session_options external_rollout_options(const node_context& ctx,
                                                          const std::string& spec) {
  auto o = worker_options_from_config<workers::rollout_session_options>(ctx.cfg, spec);
  o.vocab_size = ctx.running_job->vocab_size();
  o.max_completion_tokens = ctx.running_job->max_completion_tokens();
  o.max_samples_per_message = static_cast<uint32_t>(ledger::kMaxSamplesPerMessage);
  o.weights = [job = ctx.running_job](uint64_t v, bool refetch) -> result<nlohmann::json> {
    static workers::version_files files;
    auto bytes = job->policy_version_bytes(v);
    if (!bytes) return bytes.err();
    return files.file_of(v, **bytes, refetch);
  };
  return o;
}

class rollout_worker {
 public:
  // `group`: this worker leads a rollout group across nodes (its work spans the members).
  rollout_worker(caf::blocking_actor* self, std::shared_ptr<node_context> ctx, uint32_t k,
                 group_member_link* group = nullptr)
      : worker_index_(k),
        group_(group),
        self_(self),
        ctx_(std::move(ctx)),
        worker_(ctx_->id + "/" + std::to_string(k)),
        log_(logger("rollout")) {}

  // Ok when it left for a stop or drain (its own node's, or its group's); the error when its
  // group broke (a member lost) or its work could not be made. A group's leader reports the
  // error before its work leaves the group's fabric (the ranks' teardown meets the members').
  status run() {
    status st = work_and_lease();
    if (external_) external_->stop(kWorkerStopGraceMs);
    // A group of worker processes: its members serve their workers until this round (a broken
    // group's round fails at once: they have left already).
    if (st && group_ && external_ && group_->still_current())
      (void)all_members_allgather(*group_, nlohmann::json{{"op", "stop"}}.dump(), kStopRoundMs);
    if (!st && group_) group_->report_failure(st.err().message);
    work_.reset();
    return st;
  }

 private:
  status work_and_lease() {
    // rollout.worker: a user's process generates; this actor keeps leasing, fencing,
    // delivery and reports (python/WORKERS.md). One process per rollout worker actor, and no
    // native model: building one (with job.rollout_ep_ranks > 1 an expert-parallel group and
    // its fabric endpoints) held the worker's start back ~0.4 s for a model never used.
    const std::string spec = ctx_->cfg.get_string("rollout.worker");
    auto r = ctx_->running_job->make_reward();
    if (!r) {
      if (group_) return r.err();  // the group re-forms; no actor restart
      fail_actor(self_, r.err().to_string());
      return ok_status();
    }
    reward_ = std::move(*r);
    if (spec.empty()) {
      auto w = group_ ? ctx_->running_job->make_group_rollout_work(*group_)
                      : ctx_->running_job->make_rollout_work();
      if (!w) {
        if (group_) return w.err();
        fail_actor(self_, w.err().to_string());
        return ok_status();
      }
      work_ = std::move(*w);
    } else {
      auto o = external_rollout_options(*ctx_, spec);
      if (group_) {
        // A Python rollout group (python/WORKERS.md "Rollout groups"): this node's worker is
        // rank 0 (it gets the leases, broadcasts them and submits); the members learn where
        // the ranks meet in this round and start theirs.
        auto rv = workers::pick_rendezvous(ctx_->cfg, group_->incarnation());
        if (!rv) return error(rv.err().code, "rollout group " + rv.err().message);
        auto round = all_members_allgather(*group_, workers::to_json(*rv).dump(), kRendezvousMs);
        if (!round) return round.err();
        o.group = workers::group_place(*rv, 0, group_->num_members());
        log_->info("rollout group incarnation {}: {} Python ranks meet at {}:{}",
                   group_->incarnation(), group_->num_members(), rv->addr, rv->port);
      }
      auto e = workers::rollout_session::create(std::move(o));
      if (!e) {
        if (group_) return e.err();
        fail_actor(self_, e.err().to_string());
        return ok_status();
      }
      external_ = std::move(*e);
      // The members' workers wait for rank 0's in their process group: start it now, not at
      // the first lease. A failure is the first lease's to report (it fails the group).
      if (group_) (void)external_->start();
    }
    {
      std::lock_guard<std::mutex> lk(ctx_->env_mu);
      if (!ctx_->env_counters) ctx_->env_counters = std::make_shared<env::env_link_counters>();
    }
    env::env_client_options env_opts;
    env_opts.zmq = ctx_->zmq;
    env_opts.step_timeout_ms = ctx_->cfg.get_int("env.step_timeout_ms");
    env_opts.discover_env_nodes = [self = self_, ctx = ctx_] {
      return discover(self, *ctx, node_role::env);
    };
    env_opts.stopping = &ctx_->stopping;
    env_ = env::make_env_client(std::move(env_opts), ctx_->env_counters);
    if (work_) work_->use_environments(env_.get());
    lease_batch_ = static_cast<uint32_t>(
        std::clamp<int64_t>(ctx_->cfg.get_int("actors.lease_batch"), 1, 4096));
    int64_t last_err_log = 0, last_idle = 0;
    status out = ok_status();
    while (mailbox_ok(self_, *ctx_, 0)) {
      if (worker_index_ == 0) send_env_stats();
      if (draining()) {  // stop leasing; exit normally (transient: no restart)
        // An external worker hears the notice also between leases (before it is stopped).
        if (external_) (void)external_->notice(drain_by(), "drain");
        break;
      }
      if ((work_ && !work_->usable()) || (group_ && !group_->still_current())) {
        out = error(errc::peer_dead, "its rollout group broke");
        break;
      }
      if (group_worker_gone()) {
        out = error(errc::peer_dead, "rollout rank 0's worker is gone; the group re-forms");
        break;
      }
      if (queue_.empty()) {
        settle_reports();  // the batch's reports became durable while its last unit ran
        const uint64_t work_seen = ctx_->work_signal();  // before asking: no wake-up is missed
        auto got = fetch_leases();
        if (!got) {
          auto c = got.err().code;
          // A group's leader without work asks its members now and then (hears a drain).
          if (group_ && work_ && steady_ms() - last_idle > 300) {
            last_idle = steady_ms();
            if (auto st = work_->idle(); !st) {
              out = st;
              break;
            }
          }
          if (c != errc::not_found && c != errc::capacity_exceeded && c != errc::shutting_down &&
              steady_ms() - last_err_log > 2000) {
            log_->warn("{}: lease failed: {}", worker_, got.err().to_string());
            last_err_log = steady_ms();
          }
          if (c == errc::not_found) {
            // Empty queue: the next iteration opens when a version arrives, which wakes this.
            ctx_->wait_for_work(work_seen, 20);
            if (!mailbox_ok(self_, *ctx_, 0)) break;
          } else if (!mailbox_ok(self_, *ctx_, 200)) {
            break;
          }
          continue;
        }
        queue_.assign(got->begin(), got->end());
        if (!external_) prepare_queued();
      }
      messages::lease l = std::move(queue_.front());
      queue_.pop_front();
      // Expired while it waited in the queue: the ledger re-opens it (lease_expired) and
      // fences its attempt, so running it would only make samples the shard refuses.
      if (static_cast<uint64_t>(unix_now_ms()) >= l.deadline_unix_ms) {
        log_->warn("{}: lease of unit {} attempt {} expired in the local queue; skipped", worker_,
                   l.unit.id, l.attempt);
        continue;
      }
      if (!run_unit(l)) {
        if ((work_ && !work_->usable()) || group_worker_gone() ||
            (group_ && !group_->still_current())) {  // the group broke under the unit: re-form
          out = error(errc::peer_dead,
                      "its rollout group broke during unit " + std::to_string(l.unit.id));
          break;
        }
        if (!mailbox_ok(self_, *ctx_, 200)) break;  // a failing unit: don't spin
      }
    }
    settle_reports();
    give_back_queued();
    return out;
  }

  // The node drains, or (a group's leader) a member of its group does: the group drains.
  bool draining() const { return drain_by() != 0; }
  int64_t drain_by() const {
    const int64_t mine = ctx_->drain_by_ms.load();
    const int64_t group = work_ ? work_->group_drain_by_unix_ms() : 0;
    return mine == 0 ? group : group == 0 ? mine : std::min(mine, group);
  }

  // Leases for this worker: one lease per request when actors.lease_batch is 1 (lease_atom),
  // else up to that many in one lease batch (leases_atom, messages::lease_batch).
  result<std::vector<messages::lease>> fetch_leases() {
    messages::lease_request req;
    req.worker = worker_;
    req.policy_version = ctx_->policy_version.load();
    req.max_units = lease_batch_;
    if (lease_batch_ == 1) {
      auto raw = call_coordinator(self_, *ctx_,
                                  caf::make_message(lease_atom::value, messages::encode(req)));
      if (!raw) return raw.err();
      auto l = messages::decode<messages::lease>(*raw);
      if (!l) return error(l.err().code, "undecodable lease: " + l.err().message);
      return std::vector<messages::lease>{std::move(*l)};
    }
    auto raw = call_coordinator(self_, *ctx_,
                                caf::make_message(leases_atom::value, messages::encode(req)));
    if (!raw) return raw.err();
    auto batch = messages::decode<messages::lease_batch>(*raw);
    if (!batch) return error(batch.err().code, "undecodable lease batch: " + batch.err().message);
    return std::move(batch->leases);
  }

  // A unit's report goes out at once and its answer is taken later (settle_reports: before
  // the next lease request, and before the worker leaves), so the next unit of a lease batch
  // runs while the coordinator makes this one durable; the reports of a batch then share the
  // coordinator's group commit (one fsync) instead of waiting one after another. A report
  // that is lost costs what a lost report always cost: the lease expires and the unit is
  // run again under a new attempt (the old one fenced at the shard).
  void send_report(const messages::unit_report& rep) {
    auto coord = ctx_->coordinator();
    if (!coord) {
      log_->warn("{}: report of unit {} attempt {}: not connected to the coordinator", worker_,
                 rep.unit_id, rep.attempt);
      return;
    }
    pending_reports_.push_back(
        {rep.unit_id, rep.attempt, rep.status == messages::unit_status::finished,
         self_->request(coord, std::chrono::milliseconds(ctx_->cp.request_timeout_ms),
                        report_atom::value, messages::encode(rep))});
    if (pending_reports_.size() >= kMaxPendingReports) settle_reports();
  }

  void settle_reports() {
    for (auto& p : pending_reports_) {
      status st;
      p.answer.receive(
          [&](std::string& r) {
            if (auto reply = coordinator_reply(std::move(r)); !reply) st = reply.err();
          },
          [&](caf::error& e) {
            st = error(errc::peer_dead, "coordinator: " + self_->system().render(e));
          });
      if (!st) {
        log_->warn("{}: report of unit {} attempt {}: {}", worker_, p.unit, p.attempt,
                   st.err().to_string());
        continue;
      }
      int64_t never = 0;
      if (p.finished) ctx_->first_commit_unix_ms.compare_exchange_strong(never, unix_now_ms());
    }
    pending_reports_.clear();
  }

  // Lets the work generate every prompt group of the leases just fetched at once (those of the
  // first lease's policy version; a batch is granted at one moment, so normally all). The
  // time it took is spread evenly over those groups' samples (generate_us), so the report's
  // generation figures still add up to the work done.
  void prepare_queued() {
    prepared_us_per_sample_.clear();
    if (queue_.empty()) return;
    const uint64_t version = queue_.front().policy_version;
    std::vector<prompt_group> groups;
    uint64_t num_samples = 0;
    for (const auto& l : queue_) {
      if (l.policy_version != version) continue;
      for (auto id : l.unit.group_ids) {
        auto prompt = ctx_->running_job->prompt(id);
        if (!prompt) return;  // run_unit reports it with the unit
        groups.push_back({id, std::move(*prompt)});
        num_samples += l.unit.samples_per_group;
      }
    }
    const auto t0 = std::chrono::steady_clock::now();
    if (auto st = work_->prepare(groups, version); !st) {
      log_->warn("{}: generating {} prompt group(s) at once failed ({}): one by one instead",
                 worker_, groups.size(), st.err().to_string());
      return;
    }
    const uint32_t per = num_samples ? micros_since(t0) / static_cast<uint32_t>(num_samples) : 0;
    for (const auto& g : groups) prepared_us_per_sample_[g.group_id] = per;
  }

  // Leases fetched but not started go back in one message (drain, stop): pending again at
  // once instead of at their deadline. If the coordinator does not answer they still expire.
  void give_back_queued() {
    if (queue_.empty()) return;
    messages::lease_give_back back;
    back.worker = worker_;
    for (const auto& l : queue_) back.leases.push_back({l.unit.id, l.attempt});
    const size_t n = back.leases.size();
    log_->info("{}: giving back {} unstarted lease(s)", worker_, n);
    auto r = call_coordinator(self_, *ctx_,
                              caf::make_message(giveback_atom::value, messages::encode(back)));
    if (!r)
      log_->warn("{}: give back of {} unstarted lease(s): {}", worker_, n, r.err().to_string());
    if (ctx_->draining()) ctx_->units_returned += static_cast<uint32_t>(n);
    queue_.clear();
  }

  // False when the unit failed (not merely returned).
  bool run_unit(const messages::lease& l) {
    if (external_) return run_unit_external(l);
    ++ctx_->active_units;
    const uint32_t G = l.unit.samples_per_group;
    const uint32_t n = static_cast<uint32_t>(l.unit.group_ids.size()) * G;
    uint32_t seq = 0;        // samples generated: each one's seq in the unit
    uint32_t delivered = 0;  // samples handed to the reward hop or the shard
    std::string fail;
    bool returned = false;
    int64_t t0 = steady_ms();
    // Whole groups generated and not yet delivered. Groups that were generated together
    // (prepare_queued) leave together, one message on each hop for the unit's groups instead
    // of one per group: each message costs the rollout, the reward node, the shard and their
    // ZeroMQ I/O threads a wake-up. A group generated on its own leaves at once, so the shard
    // has it while the next one generates.
    std::vector<messages::sample> outgoing;
    for (uint32_t gi = 0; gi < l.unit.group_ids.size() && fail.empty() && !returned; ++gi) {
      auto prompt_or = ctx_->running_job->prompt(l.unit.group_ids[gi]);
      if (!prompt_or) {
        fail = prompt_or.err().to_string();
        break;
      }
      const auto& prompt = *prompt_or;
      work_->begin_group(l.unit.group_ids[gi]);
      // A group's samples go out together (with the unit's other prepared groups, above); a
      // unit given back or failed mid-group delivers none of what it holds (its attempt is
      // fenced anyway).
      std::vector<messages::sample> group;
      group.reserve(G);
      for (uint32_t i = 0; i < G; ++i) {
        if (ctx_->stopping) {
          returned = true;
          break;
        }
        if (draining()) {
          // Finish the unit only if it fits before the drain deadline, judged by this
          // worker's measured cost per sample; otherwise give it back now.
          double per = seq ? double(steady_ms() - t0) / seq : avg_sample_ms_;
          if (unix_now_ms() + static_cast<int64_t>(per * (n - seq)) > drain_by()) {
            returned = true;
            break;
          }
        }
        const auto t_gen = std::chrono::steady_clock::now();
        auto gs = work_->generate(prompt, gi, i, l.policy_version);
        if (!gs) {
          fail = gs.err().to_string();
          break;
        }
        auto prepared = prepared_us_per_sample_.find(l.unit.group_ids[gi]);
        const uint32_t generate_us =
            micros_since(t_gen) +
            (prepared == prepared_us_per_sample_.end() ? 0 : prepared->second);
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
        s.rewarded = gs->rewarded;  // a multi-turn episode's reward comes from its environment
        s.reward = gs->reward;
        s.from_env = std::move(gs->from_env);
        s.env_us = gs->env_us;
        s.env_steps = gs->env_steps;
        group.push_back(std::move(s));
        ++seq;
      }
      if (!fail.empty() || returned) break;
      outgoing.insert(outgoing.end(), std::make_move_iterator(group.begin()),
                      std::make_move_iterator(group.end()));
      const bool next_was_prepared = gi + 1 < l.unit.group_ids.size() &&
                                     prepared_us_per_sample_.count(l.unit.group_ids[gi + 1]) > 0 &&
                                     outgoing.size() + G <= ledger::kMaxSamplesPerMessage;
      if (next_was_prepared) continue;
      if (auto st = deliver(outgoing, l.shard_endpoint, l.deadline_unix_ms); !st) {
        fail = st.err().to_string();
        break;
      }
      delivered += static_cast<uint32_t>(outgoing.size());
      outgoing.clear();
    }
    if (seq) avg_sample_ms_ = 0.7 * avg_sample_ms_ + 0.3 * double(steady_ms() - t0) / seq;
    messages::unit_report rep;
    rep.unit_id = l.unit.id;
    rep.attempt = l.attempt;
    rep.worker = worker_;
    rep.samples_produced = delivered;
    if (fail.empty() && !returned) {
      rep.status = messages::unit_status::finished;
    } else {
      rep.status = fail.empty() ? messages::unit_status::returned : messages::unit_status::failed;
      rep.reason = fail.empty() ? "drain: does not fit before the deadline" : fail;
      if (!fail.empty()) log_->warn("{}: unit {} failed: {}", worker_, l.unit.id, fail);
    }
    send_report(rep);
    if (ctx_->draining())
      (returned || !fail.empty() ? ctx_->units_returned : ctx_->units_finished)++;
    --ctx_->active_units;
    return fail.empty();
  }

  // A unit generated by the external worker: the lease offered to it, each sample it submits
  // checked by the session (fencing token, unit, duplicates, shape), delivered exactly as a
  // native sample and acknowledged to the worker; the report as for native work. The worker
  // ends the lease (lease_done after every sample, or give_back); a drain sends it a notice
  // and returns the unit at the drain deadline if it is not done; the lease deadline fails it.
  // A group's workers live and die together: rank 0's is not restarted inside an incarnation
  // (the other ranks would wait for it in their collectives); the group re-forms instead.
  bool group_worker_gone() const {
    return group_ && external_ && external_->starts() > 0 && !external_->running();
  }

  bool run_unit_external(const messages::lease& l) {
    ++ctx_->active_units;
    const uint32_t G = l.unit.samples_per_group;
    const uint32_t n = static_cast<uint32_t>(l.unit.group_ids.size()) * G;
    workers::lease_offer off;
    off.unit = l.unit.id;
    off.attempt = l.attempt;
    // The newest version this node has heard of when the lease names an older one: the lease
    // was granted before the worker could take it (a worker still starting), and an overtaken
    // version soon leaves every cache (an external trainer publishes only through them) and
    // its samples are stale. A newer version than the lease's only makes samples fresher.
    // Picked once the worker runs: starting it may take longer than a version lives.
    std::string fail, give_back_reason;
    if (group_worker_gone())
      fail = "rollout rank 0's worker is gone; the group re-forms";
    else if (auto st = external_->start(); !st)
      fail = st.err().to_string();
    off.policy_version = std::max(l.policy_version, ctx_->policy_version.load());
    off.group_size = G;
    off.deadline_unix_ms = l.deadline_unix_ms;
    off.sampling = ctx_->running_job->sampling();
    for (auto id : l.unit.group_ids) {
      if (!fail.empty()) break;
      auto prompt = ctx_->running_job->prompt(id);
      if (!prompt) {
        fail = prompt.err().to_string();
        break;
      }
      off.groups.emplace_back(id, std::move(*prompt));
    }
    if (fail.empty())
      if (auto st = external_->offer(off); !st) fail = st.err().to_string();
    uint32_t delivered = 0;
    bool returned = false, noticed = false, done = false;
    auto t_last = std::chrono::steady_clock::now();
    while (fail.empty() && !returned && !done) {
      if (ctx_->stopping) {
        returned = true;
        break;
      }
      if (group_ && !group_->still_current()) {  // a member (or its worker) was lost
        fail = "its rollout group broke (a member was lost) with " + std::to_string(delivered) +
               " of " + std::to_string(n) + " samples submitted";
        break;
      }
      if (draining()) {
        if (!noticed) {  // once per lease here; the session sends it once per process
          noticed = true;
          if (auto st = external_->notice(drain_by(), "drain"); !st) fail = st.err().to_string();
        }
        if (unix_now_ms() >= drain_by()) {
          returned = true;
          give_back_reason = "drain: the worker did not finish before the deadline";
          break;
        }
      }
      if (static_cast<uint64_t>(unix_now_ms()) >= l.deadline_unix_ms) {
        fail = "the lease's deadline passed with " + std::to_string(delivered) + " of " +
               std::to_string(n) + " samples submitted";
        break;
      }
      auto ev = external_->next(50);
      if (!ev) {
        fail = ev.err().to_string();
        break;
      }
      if (ev->kind == workers::rollout_event_kind::none) {
        // Keep hearing stop/drain while the worker works; a shutdown returns the unit.
        if (!mailbox_ok(self_, *ctx_, 0)) returned = true;
        continue;
      }
      if (ev->kind == workers::rollout_event_kind::give_back) {
        returned = true;
        give_back_reason = "the worker gave it back: " + ev->reason;
        break;
      }
      if (ev->kind == workers::rollout_event_kind::done) {
        if (delivered != n)
          fail = "the worker ended the lease with " + std::to_string(delivered) + " of " +
                 std::to_string(n) + " samples";
        done = true;
        break;
      }
      // One `sample`, or a `samples` batch (a whole group, say): delivered as one message
      // towards the shard and acknowledged to the worker once.
      std::vector<messages::sample> batch;
      batch.reserve(ev->samples.size());
      const uint32_t generate_us = micros_since(t_last);
      for (auto& x : ev->samples) {
        messages::sample s;
        s.work_unit = l.unit.id;
        s.attempt = l.attempt;
        s.seq = x.group_index * G + x.index_in_group;  // any submission order, one seq each
        s.policy_version = off.policy_version;
        s.group_id = l.unit.group_ids[x.group_index];
        s.index_in_group = x.index_in_group;
        s.prompt_tokens = off.groups[x.group_index].second;
        s.tokens = std::move(x.tokens);
        s.logprobs = std::move(x.logprobs);
        s.worker = worker_;
        // The time since the last delivery, spread over the batch.
        s.generate_us = generate_us / static_cast<uint32_t>(ev->samples.size());
        batch.push_back(std::move(s));
      }
      if (auto st = deliver(batch, l.shard_endpoint, l.deadline_unix_ms); !st) {
        fail = st.err().to_string();
        break;
      }
      t_last = std::chrono::steady_clock::now();
      delivered += static_cast<uint32_t>(batch.size());
      if (auto st = external_->ack(*ev); !st) fail = st.err().to_string();
    }
    messages::unit_report rep;
    rep.unit_id = l.unit.id;
    rep.attempt = l.attempt;
    rep.worker = worker_;
    rep.samples_produced = delivered;
    std::string closed = "finished";
    if (fail.empty() && !returned) {
      rep.status = messages::unit_status::finished;
    } else if (fail.empty()) {
      rep.status = messages::unit_status::returned;
      rep.reason = give_back_reason.empty() ? "node stopping" : give_back_reason;
      closed = "returned";
    } else {
      rep.status = messages::unit_status::failed;
      rep.reason = fail;
      closed = "failed";
      log_->warn("{}: unit {} failed: {}", worker_, l.unit.id, fail);
    }
    send_report(rep);
    (void)external_->close(closed, rep.reason);
    {
      std::lock_guard<std::mutex> lk(ctx_->external_mu);
      ctx_->external_stats[worker_index_] = external_->stats().dump();
    }
    if (ctx_->draining())
      (fail.empty() && !returned ? ctx_->units_finished : ctx_->units_returned)++;
    --ctx_->active_units;
    return fail.empty();
  }

  // Whole groups' samples of a lease (one group, or a unit's groups generated together):
  // through a reward node when one is alive, as one message; otherwise scored here and sent to the
  // shard. Samples an environment scored (multi-turn episodes) go straight to the shard.
  status deliver(std::vector<messages::sample>& samples, const std::string& shard_ep,
                 uint64_t lease_deadline_unix_ms) {
    if (std::all_of(samples.begin(), samples.end(), [](const auto& s) { return s.rewarded; }))
      return send_to_shard(samples, shard_ep, lease_deadline_unix_ms);
    if (steady_ms() >= next_discovery_) find_reward_nodes();
    // reward.worker: only the reward nodes run the user's reward (python/WORKERS.md), so
    // this process never scores with the job's own: wait for a reward node, up to the lease.
    const bool remote_only = !ctx_->cfg.get_string("reward.worker").empty();
    while (remote_only && !push_) {
      if (static_cast<uint64_t>(unix_now_ms()) > lease_deadline_unix_ms)
        return error(errc::timeout,
                     "no reward node alive to score with reward.worker before the lease deadline");
      if (!mailbox_ok(self_, *ctx_, 200)) return error(errc::shutting_down, "node stopping");
      find_reward_nodes();
    }
    if (push_) {
      std::vector<std::string> encoded;
      encoded.reserve(samples.size());
      for (const auto& s : samples) encoded.push_back(messages::encode(s));
      auto st = push_->send(shard_ep, encoded);
      if (st) return st;
      log_->warn("{}: no reward node took {} sample(s) ({}){}", worker_, samples.size(),
                 st.err().message, remote_only ? "" : "; scoring locally");
      push_.reset();
      reward_eps_.clear();
      next_discovery_ = steady_ms() + 2000;
      if (remote_only) return st;  // the unit fails and runs again
    } else if (!warned_local_) {
      log_->warn("{}: no reward node alive: scoring in the rollout process", worker_);
      warned_local_ = true;
    }
    for (auto& s : samples) {
      if (s.rewarded) continue;
      const auto t_score = std::chrono::steady_clock::now();
      auto score = reward_->score(s.prompt_tokens, s.tokens);
      if (!score) return score.err();
      s.reward_us = micros_since(t_score);
      s.reward = *score;
      s.rewarded = true;
    }
    return send_to_shard(samples, shard_ep, lease_deadline_unix_ms);
  }

  // The live reward nodes, asked of the coordinator; the reward hop reconnected when they
  // changed.
  void find_reward_nodes() {
    auto found = discover(self_, *ctx_, node_role::reward);
    next_discovery_ = steady_ms() + 2000;
    if (!found || *found == reward_eps_) return;
    const auto& eps = *found;
    reward_eps_ = eps;
    push_.reset();
    if (eps.empty()) return;
    auto p = ledger::reward_push::connect(ctx_->zmq, eps, 1000);
    if (p)
      push_ = std::move(*p);
    else
      log_->warn("{}: reward hop: {}", worker_, p.err().to_string());
  }

  // Scored samples straight to their shard (as few messages as the credit allows), waiting
  // for credit up to the lease deadline.
  status send_to_shard(const std::vector<messages::sample>& samples, const std::string& shard_ep,
                       uint64_t lease_deadline_unix_ms) {
    auto& p = direct_[shard_ep];
    if (!p) {
      auto c = ledger::sample_producer::connect(ctx_->zmq, shard_ep, worker_);
      if (!c) return c.err();
      p = std::move(*c);
    }
    int64_t next_check = steady_ms() + 1000;
    for (size_t sent = 0; sent < samples.size();) {
      auto n = p->try_send_some(samples, sent);
      if (n) {
        sent += *n;
        continue;
      }
      if (n.err().code != errc::capacity_exceeded) return n.err();
      if (ctx_->stopping) return error(errc::shutting_down, "node stopping");
      // No credit: a slow trainer (wait) or a dead shard (give up; the ledger has expired
      // the lease and re-opens the unit). A dead peer never answers, so ask the coordinator.
      if (static_cast<uint64_t>(unix_now_ms()) > lease_deadline_unix_ms)
        return error(errc::timeout,
                     "no credit from shard " + shard_ep + " before the lease deadline");
      if (steady_ms() > next_check) {
        next_check = steady_ms() + 1000;
        if (known_gone(self_, *ctx_, node_role::buffer, shard_ep)) {
          direct_.erase(shard_ep);
          return error(errc::peer_dead, "shard " + shard_ep + " is gone");
        }
      }
      if (auto pst = p->poll(50); !pst) return pst;  // wait for the shard's credit
    }
    return ok_status();
  }

  // The node's env-link counters in its stats (episodes, steps, failures by reason).
  // The node's stats (one message, the coordinator keeps the last): the env plane's counts
  // and the weight plane's (what this node read, from where, and its way to productive).
  void send_env_stats() {
    if (steady_ms() - last_env_stats_ < 1000 || !ctx_->env_counters) return;
    last_env_stats_ = steady_ms();
    nlohmann::json st = nlohmann::json::object();
    {
      std::lock_guard<std::mutex> lk(ctx_->env_counters->mu);
      if (ctx_->env_counters->num_episodes > 0)
        st["env"] = {{"episodes", ctx_->env_counters->num_episodes},
                     {"steps", ctx_->env_counters->num_steps},
                     {"episodes_failed", ctx_->env_counters->episodes_failed}};
    }
    auto w = ctx_->running_job->weights_stats();
    if (!w.is_null()) st["weights"] = std::move(w);
    {
      std::lock_guard<std::mutex> lk(ctx_->external_mu);
      for (const auto& [k, text] : ctx_->external_stats)
        st["external_worker"][std::to_string(k)] = nlohmann::json::parse(text);
    }
    st["timeline"] = node_timeline(*ctx_);
    if (st.size() == 1 && !ctx_->first_commit_unix_ms) return;  // nothing to tell yet
    // Its weights peer server (fan-out) is a ZeroMQ listener.
    st["zmq_refused_connections"] = zmq_refused_connections(*ctx_);
    if (auto c = ctx_->coordinator()) self_->send(c, stats_atom::value, ctx_->id, st.dump());
  }

  uint32_t worker_index_;
  group_member_link* group_;  // null: not a rollout group's leader
  int64_t last_env_stats_ = 0;
  std::unique_ptr<env::env_link> env_;
  caf::blocking_actor* self_;
  std::shared_ptr<node_context> ctx_;
  std::string worker_;
  std::shared_ptr<spdlog::logger> log_;
  std::unique_ptr<rollout_work> work_;
  std::unique_ptr<reward_function> reward_;
  std::unique_ptr<workers::rollout_session> external_;  // rollout.worker; null: native work
  double avg_sample_ms_ = 1.0;
  std::unique_ptr<ledger::reward_push> push_;
  std::vector<std::string> reward_eps_;
  int64_t next_discovery_ = 0;
  bool warned_local_ = false;
  std::map<std::string, std::unique_ptr<ledger::sample_producer>> direct_;
  uint32_t lease_batch_ = 1;  // actors.lease_batch
  struct pending_report {
    uint64_t unit = 0;
    uint32_t attempt = 0;
    bool finished = false;
    caf::response_handle<caf::blocking_actor, caf::message, true> answer;
  };
  static constexpr size_t kMaxPendingReports = 16;
  std::vector<pending_report> pending_reports_;  // sent, answer not taken yet (send_report)
  std::deque<messages::lease> queue_;            // leased, not started; worked in order
  // Group id -> its share of prepare_queued()'s time per sample (added to generate_us).
  std::map<uint64_t, uint32_t> prepared_us_per_sample_;
};

// Member k > 0 of a Python rollout group (rollout.worker with rollout.group_size > 1,
// python/WORKERS.md "Rollout groups"): takes member 0's rendezvous, starts its own worker as
// rank k and serves it (weights(v) from this node's feed; its leases come from rank 0 over the
// process group, and it submits nothing) until member 0 stops the members (ok), the group
// breaks, the worker dies or this node stops or drains (the error says which: the group
// re-forms without it). Its worker is never restarted inside an incarnation.
status serve_external_rollout_member(caf::blocking_actor* self,
                                     const std::shared_ptr<node_context>& ctx,
                                     group_member_link& link) {
  const uint32_t me = link.member_index(), n = link.num_members();
  auto first = all_members_allgather(link, "{}", kRendezvousMs);
  if (!first) return first.err();
  if (first->empty()) return error(errc::internal, "rollout group round without member 0");
  auto rv = workers::parse_rendezvous((*first)[0], "rollout group");
  if (!rv) return rv.err();
  auto o = external_rollout_options(*ctx, ctx->cfg.get_string("rollout.worker"));
  o.group = workers::group_place(*rv, me, n);
  auto session = workers::rollout_session::create(std::move(o));
  if (!session) return session.err();
  logger("rollout")->info(
      "rollout rank {} of {} (group incarnation {}): its worker meets rank 0 "
      "at {}:{}",
      me, n, rv->incarnation, rv->addr, rv->port);
  status st = ok_status();
  bool left = false;  // this node stops or drains
  {
    member_stop_round stop(link);
    st = (*session)->serve_member([&] {
      if (!mailbox_ok(self, *ctx, 0) || ctx->draining()) left = true;
      return left || stop.ended() || !link.still_current();
    });
    if (st && stop.ended()) st = stop.outcome("rollout group");
    if (st && !stop.ended() && left)
      st = error(errc::shutting_down, "rollout group member " + std::to_string(me) +
                                          (ctx->draining() ? " drains" : " stops") +
                                          ": the group re-forms without it");
    if (st && !stop.ended()) st = error(errc::peer_dead, "the rollout group broke");
    if (!st) link.report_failure(st.err().to_string());  // ends the waiter's round
  }
  (*session)->stop(kWorkerStopGraceMs);
  return st;
}

// One member of a rollout group across nodes, incarnation after incarnation: join, lead or
// follow until the group breaks (a member lost or failed) or dissolves (a member drains),
// then join the next incarnation (with the lost member's replacement), until the node stops
// or drains.
void rollout_group_loop(caf::blocking_actor* self, const std::shared_ptr<node_context>& ctx) {
  auto log = logger("rollout");
  const group_membership m = rollout_membership(ctx->cfg);
  while (!ctx->stopping) {
    auto view = join_node_group(self, *ctx, m);
    if (!view) return;  // stopping or draining
    log->info("member {} of rollout group {} (incarnation {}, members {})", view->member_index,
              view->group, view->incarnation, nlohmann::json(view->members).dump());
    group_member_link link(self->system(), ctx, *view);
    const bool external = !ctx->cfg.get_string("rollout.worker").empty();
    status st = view->member_index == 0 ? rollout_worker(self, ctx, 0, &link).run()
                : external              ? serve_external_rollout_member(self, ctx, link)
                                        : ctx->running_job->serve_rollout_member(link);
    if (ctx->stopping) return;
    const std::string why = !st                       ? st.err().to_string()
                            : view->member_index == 0 ? "its leader dissolved it (drain)"
                                                      : "its leader stopped the members";
    if (link.still_current()) {
      log->warn("rollout group {} incarnation {} ends: {}", view->group, view->incarnation, why);
      // A follower the leader stopped waits for the leader to end the incarnation (its cause
      // is the leader's: which member drains); everyone else ends it now.
      const bool leader_ends_it = st && view->member_index != 0;
      if (!leader_ends_it) link.report_failure(why);
      // Until the coordinator has ended the incarnation, a join is a no-op that would hand
      // back the same one.
      for (int i = 0; i < 50 && link.still_current(); ++i)
        if (!mailbox_ok(self, *ctx, 100)) return;
      if (leader_ends_it && link.still_current()) link.report_failure(why);
    }
  }
}

}  // namespace

void rollout_loop(caf::blocking_actor* self, std::shared_ptr<node_context> ctx,
                  uint32_t worker_index) {
  running_guard g(ctx->workers_running);
  if (ctx->cfg.get_int("rollout.group_size") <= 1) {
    (void)rollout_worker(self, std::move(ctx), worker_index).run();
    return;
  }
  // One model instance per group: worker 0 of each member carries it, the others have none.
  if (worker_index == 0) rollout_group_loop(self, ctx);
}

}  // namespace moerl::actors
