// The trainer role: actors.trainer_ranks ranks under one_for_all. Rank 0 pulls batches of
// whole prompt groups from every shard and hands them to the job's trainer_step, which may
// spread its work over the other ranks (trainer_ranks, job.h); it publishes each new policy
// version the step makes. Ranks 1.. run what the step hands them.
#include <algorithm>
#include <chrono>
#include <functional>
#include <map>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/atoms.h"
#include "actors/internal/job_history.h"
#include "actors/internal/node_group_member.h"
#include "actors/internal/role_loops.h"
#include "actors/internal/step_asks.h"
#include "actors/internal/trainer_claim.h"
#include "actors/wait_clock.h"
#include "common/log.h"
#include "messages/weights.h"

namespace moerl::actors {
struct rank_task {
  std::function<void()> run;
};
}  // namespace moerl::actors

// A rank's task only travels between the ranks of one process, never over the network.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const moerl::actors::rank_task>)

namespace moerl::actors {

// The ranks as the job's step sees them. Lives in the node context (it outlives the step);
// each incarnation of rank 0 binds itself, since the requests to the ranks are its own.
class rank_pool final : public trainer_ranks {
 public:
  rank_pool(node_context& ctx, uint32_t num_ranks) : ctx_(ctx), num_ranks_(num_ranks) {}

  void bind(caf::blocking_actor* driver) { driver_ = driver; }
  uint32_t num_ranks() const override { return num_ranks_; }
  // The trainer group across nodes this node is a member of (trainer.group_size > 1); the
  // pool owns the member's link so it outlives the step built on it (node_context order).
  trainer_group* group() override { return link_.get(); }
  group_member_link* link() { return link_.get(); }
  // `coordinator`: the coordinator whose group the link is a member of (a view from a restarted
  // coordinator is its own re-formation, whatever its incarnation number).
  void set_link(std::unique_ptr<group_member_link> l, caf::actor_addr coordinator) {
    link_ = std::move(l);
    link_coordinator_ = std::move(coordinator);
  }
  std::unique_ptr<group_member_link> take_link() { return std::move(link_); }
  const caf::actor_addr& link_coordinator() const { return link_coordinator_; }

  status run_on_ranks(const std::vector<std::function<void()>>& work) override {
    if (work.size() != num_ranks_)
      return error(errc::invalid_argument, "run_on_ranks: " + std::to_string(work.size()) +
                                               " tasks for " + std::to_string(num_ranks_) +
                                               " ranks");
    work[0]();
    for (uint32_t r = 1; r < num_ranks_; ++r) {
      caf::actor rank;
      {
        std::lock_guard<std::mutex> lk(ctx_.ranks_mu);
        if (auto it = ctx_.ranks.find(r); it != ctx_.ranks.end()) rank = it->second;
      }
      bool ok = false;
      if (rank)
        driver_
            ->request(rank, std::chrono::seconds(10), work_atom::value,
                      std::make_shared<const rank_task>(rank_task{work[r]}))
            .receive([&](bool) { ok = true; }, [&](caf::error&) {});
      if (!ok)
        return error(errc::peer_dead, "trainer rank " + std::to_string(r) + " did not answer");
    }
    return ok_status();
  }

 private:
  node_context& ctx_;
  const uint32_t num_ranks_;
  caf::blocking_actor* driver_ = nullptr;
  std::unique_ptr<group_member_link> link_;
  caf::actor_addr link_coordinator_;
};

namespace {

void register_rank(node_context& ctx, uint32_t r, caf::actor a) {
  std::lock_guard<std::mutex> g(ctx.ranks_mu);
  ctx.ranks[r] = std::move(a);
}

// A new incarnation for a new trainer step: the wall clock in microseconds, so that the
// step of a recreated trainer node (the same consumer name) is higher than its
// predecessor's and the shards serve it what the predecessor held (LEDGER.md).
uint64_t new_incarnation() {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  return std::max<uint64_t>(1, static_cast<uint64_t>(us));
}

// Publishes the version a step made, if it is newer than the node's; true when it did.
bool announce(caf::blocking_actor* self, node_context& ctx, const train_result& res) {
  if (!res.new_version || res.manifest.version <= ctx.policy_version) return false;
  ctx.policy_version = res.manifest.version;
  if (auto c = ctx.coordinator())
    self->send(c, version_atom::value, res.manifest.version, messages::encode(res.manifest));
  return true;
}

}  // namespace

void trainer_rank_loop(caf::blocking_actor* self, std::shared_ptr<node_context> ctx,
                       uint32_t rank) {
  running_guard g(ctx->workers_running);
  register_rank(*ctx, rank, caf::actor_cast<caf::actor>(self));
  bool keep = true;
  while (keep && !ctx->stopping && !ctx->draining()) {
    self->receive([&](shutdown_atom) { keep = false; },
                  [&](work_atom, std::shared_ptr<const rank_task> task) -> bool {
                    task->run();
                    return true;
                  },
                  caf::after(std::chrono::milliseconds(100)) >> [] {});
  }
}

void trainer_driver_loop(caf::blocking_actor* self, std::shared_ptr<node_context> ctx,
                         uint32_t num_ranks) {
  running_guard g(ctx->workers_running);
  register_rank(*ctx, 0, caf::actor_cast<caf::actor>(self));
  auto log = logger("trainer");
  auto batch_groups = static_cast<uint32_t>(ctx->cfg.get_int("actors.trainer_batch_groups"));
  struct source {
    std::unique_ptr<ledger::batch_consumer> c;
    bool outstanding = false;
  };
  std::map<std::string, source> sources;
  step_asks asks(batch_groups);  // each shard's share of what the step still wants
  int64_t next_refresh = 0, last_stats = 0;
  job_history_sender history;  // the job's per-iteration lists, sent once each
  struct {
    uint64_t verified = 0, bad = 0, groups = 0;
    double sum_abs_advantage = 0;
  } total;  // per incarnation, like the batch count
  uint64_t batches = 0;
  if (!ctx->trainer_rank_pool)
    ctx->trainer_rank_pool = std::make_shared<rank_pool>(*ctx, num_ranks);
  ctx->trainer_rank_pool->bind(self);
  rank_pool& pool = *ctx->trainer_rank_pool;
  // A trainer group across nodes: every start of the driver (also the supervisor's restart
  // after the group broke) joins the group's next incarnation with a fresh step, which takes
  // over the groups the old step held; then the old step's rank threads leave.
  const bool in_group = ctx->cfg.get_int("trainer.group_size") > 1;
  // The broken group's step (its held groups carry over) and the link it still uses; declared
  // in this order so the step goes first.
  std::unique_ptr<group_member_link> previous_link;
  std::shared_ptr<trainer_step> previous;
  if (in_group) {
    const caf::actor_addr previous_coordinator = pool.link_coordinator();
    previous_link = pool.take_link();
    previous = std::move(ctx->trainer_state);
    auto view = join_trainer_group(self, *ctx);
    if (!view) return;  // stopping or draining
    // This driver restarted while the group it ran in is still formed under the same
    // coordinator: its part of that incarnation's work is gone (seen: a member's coordinator
    // link dropped and came back within the re-join grace, so its failure report was lost and
    // the group stayed formed), and the others would wait out fabric.op_timeout_ms for it in
    // their next round. Report the incarnation broken (again each second, until the
    // coordinator moves on) and join the next one.
    auto coordinator_addr = [&] {
      auto c = ctx->coordinator();
      return c ? c.address() : caf::actor_addr();
    };
    if (previous_link && previous_link->view().incarnation == view->incarnation &&
        previous_coordinator && previous_coordinator == coordinator_addr()) {
      const uint64_t stale = view->incarnation;
      log->warn(
          "trainer group {} is still at incarnation {}, which this member's restart left "
          "without its part: reporting it broken",
          view->group, stale);
      for (int64_t next_report = 0; view->incarnation == stale;) {
        if (steady_ms() >= next_report) {
          previous_link->report_failure(ctx->name + " restarted its trainer inside incarnation " +
                                        std::to_string(stale));
          next_report = steady_ms() + 1000;
        }
        if (!mailbox_ok(self, *ctx, 100)) return;
        view = join_trainer_group(self, *ctx);
        if (!view) return;
      }
    }
    log->info("member {} of trainer group {} (incarnation {}, members {})", view->member_index,
              view->group, view->incarnation, nlohmann::json(view->members).dump());
    pool.set_link(std::make_unique<group_member_link>(self->system(), ctx, *view),
                  coordinator_addr());
    if (view->member_index != 0) {
      auto st = ctx->running_job->serve_trainer_member(pool);
      if (ctx->stopping || ctx->draining()) return;
      const std::string why = st ? "rank 0 left the group" : st.err().to_string();
      pool.link()->report_failure(why);
      fail_actor(self, "trainer group member: " + why);
      return;
    }
  }
  // The job's learning step lives in the node context, so a one_for_all restart of the
  // ranks keeps the optimiser state and the groups it holds.
  if (!ctx->trainer_state) {
    auto made = ctx->running_job->make_trainer(*ctx->trainer_rank_pool);
    if (!made) {
      fail_actor(self, made.err().to_string());
      return;
    }
    if (!*made) {
      fail_actor(self, "job " + ctx->running_job->name() + " made no trainer step");
      return;
    }
    ctx->trainer_state = std::shared_ptr<trainer_step>(std::move(*made));
    // The broken group's step leaves with the groups it held (the new incarnation below has
    // them served again), then its rank threads and the link they used.
    previous.reset();
    previous_link.reset();
    if (pool.link()) pool.link()->report_restored(ctx->trainer_state->version());
    // A step resumed from a checkpoint starts at its version: announce it before any
    // rollout generates with the initial weights.
    if (ctx->trainer_state->version() > ctx->policy_version) {
      ctx->policy_version = ctx->trainer_state->version();
      messages::weight_manifest m;
      m.version = ctx->policy_version;
      if (auto c = ctx->coordinator())
        self->send(c, version_atom::value, m.version, messages::encode(m));
    }
    ctx->trainer_state->prepare();
  }
  // Every start of the driver is a new consumer incarnation that holds nothing, so the shards
  // serve again every group handed to the old one and not confirmed: those its step held, and
  // those still on their way to the consumer sockets that closed with the old driver (a kept
  // incarnation would leave them handed forever; LEDGER.md, "Handed to a trainer").
  ctx->trainer_state->drop_held();
  // What the previous incarnation's versions hold, told to the ledger under that incarnation
  // before the new one fences it; what its step held is dropped with it (the ledger re-opens
  // or its shards serve again what no version has).
  if (!ctx->claimed_trained.empty() && ctx->trainer_incarnation != 0) {
    if (auto told = claim_groups(self, *ctx, {}, ctx->claimed_trained); !told)
      log->warn("telling the ledger of {} trained group(s): {}", ctx->claimed_trained.size(),
                told.err().to_string());
  }
  ctx->claimed_trained.clear();
  ctx->claimed_untrained.clear();
  ctx->trainer_incarnation = new_incarnation();
  ctx->unconfirmed_batches.clear();
  // The ledger learns of the new incarnation at once: the groups its predecessors claimed from
  // shards that are gone are re-opened now, not at this incarnation's first batch.
  if (auto hello = claim_groups(self, *ctx, {}, {}); !hello) {
    if (ctx->stopping || ctx->draining()) return;
    log->warn("trainer incarnation {} not registered with the ledger: {}", ctx->trainer_incarnation,
              hello.err().to_string());
  }
  trainer_step& step = *ctx->trainer_state;
  // Tells the ledger which claimed groups a policy version has (they are trained even when
  // their shard is gone); false when it did not answer (they go with the next claim).
  auto tell_trained = [&] {
    if (ctx->claimed_trained.empty()) return true;
    auto told = claim_groups(self, *ctx, {}, ctx->claimed_trained);
    if (told) ctx->claimed_trained.clear();
    return told.ok();
  };
  // Once the step holds nothing, every batch it was given is in a policy version it made
  // (and announced): confirm them, so their shards count them trained and let them go.
  auto confirm_trained = [&] {
    if (step.num_held_groups() != 0) return;
    ctx->claimed_trained.insert(ctx->claimed_trained.end(), ctx->claimed_untrained.begin(),
                                ctx->claimed_untrained.end());
    ctx->claimed_untrained.clear();
    for (auto it = ctx->unconfirmed_batches.begin(); it != ctx->unconfirmed_batches.end();) {
      auto src = sources.find(it->first);
      if (src == sources.end()) {
        ++it;  // no consumer for it yet after a restart of rank 0: confirmed next time
        continue;
      }
      if (auto st = src->second.c->confirm(it->second); !st) {
        log->warn("confirming {} batch(es) to shard {}: {}", it->second.size(), it->first,
                  st.err().to_string());
        ++it;
        continue;
      }
      it = ctx->unconfirmed_batches.erase(it);
    }
  };
  const int64_t flush_ms = ctx->cfg.get_int("actors.trainer_flush_ms");
  const int64_t claim_gather_ms = ctx->cfg.get_int("actors.trainer_claim_gather_ms");
  // After this long with requests out and no batch, the step's groups are asked of the shards
  // without a request out too (step_asks::stalled): well before the flush, well after an
  // iteration's generation (tens of ms in the default job).
  const int64_t stall_ms = std::max<int64_t>(flush_ms / 5, 1);
  int64_t last_batch = steady_ms(), last_stall = 0;
  bool flushed = true;  // the step holds nothing yet (drop_held above)
  // Stall: time with no batch in hand, from wanting one to getting one (`stall_s` in the
  // stats). Groups a job step holds back for a full iteration do not count as work in
  // hand: the step cannot train until more arrive. Per incarnation, like the counters.
  wait_clock stalled;
  while (mailbox_ok(self, *ctx, 0)) {
    if (ctx->draining()) {  // nothing is held between batches: leave
      tell_trained();
      return;
    }
    if (pool.link() && !pool.link()->still_current()) {  // a member was lost: re-form
      fail_actor(self, "trainer group " + pool.link()->view().group + " broke");
      return;
    }
    stalled.start_waiting(steady_ms());
    if (steady_ms() >= next_refresh) {
      next_refresh = steady_ms() + 1000;
      auto found = discover(self, *ctx, node_role::buffer);
      if (!found) continue;  // the coordinator did not answer: keep the shards we have
      const auto& eps = *found;
      for (auto& e : eps)
        if (!sources.count(e)) {
          auto c =
              ledger::batch_consumer::connect(ctx->zmq, e, ctx->name, ctx->trainer_incarnation);
          if (c)
            sources[e].c = std::move(*c);
          else
            log->warn("trainer cannot reach shard {}: {}", e, c.err().to_string());
        }
      for (auto it = sources.begin(); it != sources.end();) {  // shards that left
        if (std::find(eps.begin(), eps.end(), it->first) != eps.end()) {
          ++it;
          continue;
        }
        ctx->unconfirmed_batches.erase(it->first);  // the ledger re-opened what it held
        asks.forget(it->first);
        it = sources.erase(it);
      }
      confirm_trained();  // what a failed confirmation left unconfirmed
      tell_trained();     // no batch came since the last version: not left to the next claim
    }
    if (sources.empty()) {
      if (!mailbox_ok(self, *ctx, 100)) return;
      continue;
    }
    // Every shard has a request out; the first to answer wakes the loop, and every batch
    // there by then, or within actors.trainer_claim_gather_ms after it while the step still
    // wants groups, is claimed in one claim (one journaled coordinator round trip) instead of
    // claiming batch by batch: the shards' batches of one iteration arrive within a few ms of
    // each other. Gathering batches until the step's whole iteration was there, with no bound,
    // was tried and left out: under load its runs trained on samples all one version old and
    // took more iterations to 0.9 (6 Dec).
    stalled.start_waiting(steady_ms());  // after the previous batches were worked on
    std::vector<ledger::batch_consumer*> asked;
    std::vector<std::string> shard_names, idle_shards;
    for (const auto& [ep, src] : sources) {
      shard_names.push_back(ep);
      if (!src.outstanding) idle_shards.push_back(ep);
    }
    const uint64_t wanted = step.num_groups_wanted();
    if (wanted > 0 && !idle_shards.empty() &&
        steady_ms() - std::max(last_batch, last_stall) > stall_ms) {
      asks.stalled(wanted, idle_shards);  // the requests out brought nothing for stall_ms
      last_stall = steady_ms();
    }
    for (auto& [ep, src] : sources) {
      if (!src.outstanding) {
        const uint32_t ask = asks.ask(ep, wanted, shard_names);
        if (ask == 0) continue;  // the step's other shards are asked for the rest
        if (auto st = src.c->request(ask); !st) continue;
        asks.asked(ep, ask);
        src.outstanding = true;
      }
      asked.push_back(src.c.get());
    }
    (void)ledger::batch_consumer::wait_any(asked, 10);
    struct arrived {
      std::string ep;
      messages::batch batch;
      std::vector<messages::handed_group> groups;
    };
    std::vector<arrived> got;
    std::vector<messages::handed_group> claims;
    // Takes every batch that has arrived; returns the consumers still asked.
    auto take_arrived = [&] {
      std::vector<ledger::batch_consumer*> waiting;
      for (auto& [ep, src] : sources) {
        if (!src.outstanding) continue;
        auto b = src.c->poll(0);
        if (!b || !*b) {
          waiting.push_back(src.c.get());
          continue;
        }
        src.outstanding = false;
        auto groups = handed_groups_of(**b);
        asks.answered(ep, groups ? static_cast<uint32_t>(groups->size()) : 0);
        if ((*b)->samples.empty()) continue;
        if (!groups) {
          log->error("{}: not trained", groups.err().to_string());
          continue;
        }
        claims.insert(claims.end(), groups->begin(), groups->end());
        got.push_back({ep, std::move(**b), std::move(*groups)});
      }
      return waiting;
    };
    auto waiting = take_arrived();
    if (!got.empty() && wanted > claims.size() && !waiting.empty() && claim_gather_ms > 0) {
      (void)ledger::batch_consumer::wait_any(waiting, static_cast<int>(claim_gather_ms));
      (void)take_arrived();
    }
    if (!got.empty()) {
      stalled.stop_waiting(steady_ms());
      last_batch = steady_ms();
      // Claimed before trained: the ledger says which groups this step may use (and hears
      // of the groups the last versions have).
      auto all_granted = claim_groups(self, *ctx, claims, ctx->claimed_trained);
      if (!all_granted) {
        if (ctx->stopping || ctx->draining()) return;
        log->error("claim of {} batch(es) ({} groups): {}; not trained", got.size(), claims.size(),
                   all_granted.err().to_string());
        got.clear();
      } else {
        ctx->claimed_trained.clear();
      }
      size_t first_grant = 0;
      for (auto& [ep, batch, groups] : got) {
        const auto from = all_granted->begin() + static_cast<std::ptrdiff_t>(first_grant);
        const std::vector<bool> granted(from, from + static_cast<std::ptrdiff_t>(groups.size()));
        first_grant += groups.size();
        std::vector<messages::sample> samples = granted_samples(batch, groups, granted);
        const auto num_granted = std::count(granted.begin(), granted.end(), true);
        for (size_t i = 0; i < groups.size(); ++i)
          if (granted[i]) ctx->claimed_untrained.push_back(groups[i]);
        if (static_cast<size_t>(num_granted) != groups.size())
          log->warn(
              "batch {} of shard {}: the ledger refused {} of its {} group(s) (re-opened after "
              "the shard was declared lost): not trained",
              batch.batch_id, ep, groups.size() - num_granted, groups.size());
        if (num_granted == 0) continue;
        flushed = false;
        // Before the step, which holds the batch's groups until a version has them all. A
        // batch with a refused group is not confirmed to its shard (that would count the
        // refused group trained): its granted groups are confirmed to the ledger instead.
        if (static_cast<size_t>(num_granted) == groups.size())
          ctx->unconfirmed_batches[ep].push_back(batch.batch_id);
        auto res = step.train(samples);
        if (!res) {
          // A failed step is a bug, a broken group or a rank gone: restart the trainer group.
          if (pool.link()) pool.link()->report_failure("train step: " + res.err().to_string());
          fail_actor(self, "train step: " + res.err().to_string());
          return;
        }
        ++batches;
        last_batch = steady_ms();  // idle from the step's end: a slow step is no missing batch
        total.groups += res->groups;
        total.bad += res->bad;
        total.verified += samples.size() - res->bad;
        total.sum_abs_advantage += res->sum_abs_advantage;
        ctx->trained_groups += res->groups;
        if (step.num_held_groups() == 0) asks.step_done();  // it trained what it held
        if (announce(self, *ctx, *res)) {
          log->info("policy version {} (content hash {})", res->manifest.version,
                    res->manifest.content_hash);
          last_stats = 0;  // report the new version's figures now, not at the next tick
        }
        confirm_trained();
      }
    }
    if (!flushed && steady_ms() - last_batch > flush_ms) {
      flushed = true;
      auto res = step.train({});
      stalled.start_waiting(steady_ms());
      asks.step_done();
      if (!res) {
        if (pool.link()) pool.link()->report_failure("train step: " + res.err().to_string());
        fail_actor(self, "train step (flush): " + res.err().to_string());
        return;
      }
      if (announce(self, *ctx, *res)) {
        log->info("policy version {} from a flush of held groups", res->manifest.version);
        last_stats = 0;
      }
      confirm_trained();
    }
    if (steady_ms() - last_stats > 1000) {
      last_stats = steady_ms();
      const double mean_abs_advantage =
          total.verified ? total.sum_abs_advantage / double(total.verified + total.bad) : 0.0;
      nlohmann::json st{{"batches", batches},
                        {"groups", total.groups},
                        {"samples_verified", total.verified},
                        {"samples_bad", total.bad},
                        {"policy_version", ctx->policy_version.load()},
                        {"incarnation", ctx->trainer_incarnation},
                        {"unconfirmed_batches",
                         [&] {
                           size_t n = 0;
                           for (const auto& [ep, ids] : ctx->unconfirmed_batches) n += ids.size();
                           return n;
                         }()},
                        {"stall_s", stalled.waited_s(steady_ms())},
                        {"mean_abs_advantage", mean_abs_advantage},
                        {"job", nlohmann::json()}};
      if (auto c = ctx->coordinator()) {
        // Only the history entries this coordinator lacks are built (job_history.h).
        st["job"] = step.stats(history.first_unsent(caf::to_string(c.address())));
        history.note_sent(st["job"]);
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

}  // namespace moerl::actors
