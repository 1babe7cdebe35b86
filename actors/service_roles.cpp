// The small roles, one actor each: reward (score samples from the rollout nodes and forward
// them to their shards), buffer (the shard loop between the sample plane and the ledger),
// weights (the checkpoint cache: serve policy versions, weights/). The env role is env_role.cpp.
#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <thread>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/atoms.h"
#include "actors/internal/role_loops.h"
#include "actors/internal/worker_options.h"
#include "actors/interruption.h"
#include "common/log.h"
#include "ledger/event_codec.h"
#include "messages/work.h"
#include "weights/version_reader.h"
#include "workers/external_scorer.h"

namespace moerl::actors {

// ---- reward -------------------------------------------------------------------------------

void reward_loop(caf::blocking_actor* self, std::shared_ptr<node_context> ctx) {
  running_guard g(ctx->workers_running);
  auto log = logger("reward");
  // Either the job's own reward or, with reward.worker set, a user's process scores
  // (python/WORKERS.md). A failure of that process fails one sample, never this actor.
  std::unique_ptr<reward_function> verifier;
  std::unique_ptr<workers::external_scorer> external;
  if (const auto spec = ctx->cfg.get_string("reward.worker"); !spec.empty()) {
    auto o = worker_options_from_config<workers::external_scorer_options>(ctx->cfg, spec);
    o.timeout_ms = ctx->cfg.get_int("reward.worker_timeout_ms");
    auto e = workers::external_scorer::create(std::move(o));
    if (!e) {
      fail_actor(self, e.err().to_string());
      return;
    }
    external = std::move(*e);
    (void)external->start();  // its import overlaps the first units; a failure: see start()
  } else {
    auto verifier_or = ctx->running_job->make_reward();
    if (!verifier_or) {
      fail_actor(self, verifier_or.err().to_string());
      return;
    }
    verifier = std::move(*verifier_or);
  }
  // What a message from a rollout brought, scored: its shard's endpoint and its samples
  // (usually a whole group), forwarded as one message when the shard's credit allows.
  struct scored_batch {
    std::string shard;
    std::vector<messages::sample> samples;
    size_t sent = 0;  // samples[0, sent) forwarded
  };
  std::optional<scored_batch> pending;
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
  // Scores a message's samples in place; those that cannot be are dropped (never forwarded:
  // their attempt stays incomplete and the lease expires). A multi-turn episode arrives
  // scored by its environment (env/ENV.md). A reward.worker scores the rest of the message in
  // one round trip (external_scorer::score_many); the job's own reward one by one.
  auto score_all = [&](std::vector<messages::sample>& samples) {
    std::vector<size_t> todo;
    for (size_t i = 0; i < samples.size(); ++i)
      if (!samples[i].rewarded) todo.push_back(i);
    const auto t_score = std::chrono::steady_clock::now();
    std::vector<result<float>> got;
    if (external) {
      std::vector<workers::external_scorer::score_item> items;
      for (size_t i : todo)
        items.push_back(
            {&samples[i].prompt_tokens, &samples[i].tokens, samples[i].work_unit, samples[i].seq});
      got = external->score_many(items);
    } else {
      for (size_t i : todo)
        got.push_back(verifier->score(samples[i].prompt_tokens, samples[i].tokens));
    }
    const uint32_t each_us =
        todo.empty() ? 0 : micros_since(t_score) / static_cast<uint32_t>(todo.size());
    std::vector<bool> keep(samples.size(), true);
    for (size_t k = 0; k < todo.size(); ++k) {
      auto& s = samples[todo[k]];
      s.reward_us = each_us;
      if (!got[k]) {
        ++malformed;
        log->warn("sample of unit {} seq {} not scorable: {}", s.work_unit, s.seq,
                  got[k].err().message);
        keep[todo[k]] = false;
        continue;
      }
      s.reward = *got[k];
      s.rewarded = true;
      ++scored;
    }
    std::vector<messages::sample> kept;
    for (size_t i = 0; i < samples.size(); ++i)
      if (keep[i]) kept.push_back(std::move(samples[i]));
    samples = std::move(kept);
  };
  while (mailbox_ok(self, *ctx, 0)) {
    if (steady_ms() - last_stats > 1000) {
      last_stats = steady_ms();
      nlohmann::json st{{"scored", scored},
                        {"malformed", malformed},
                        {"bad_frames", ctx->pull->num_bad_frames()},
                        {"zmq_refused_connections", zmq_refused_connections(*ctx)},
                        {"dropped_for_gone_shards", dropped_for_gone}};
      if (external) st["external_worker"] = external->stats();
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
      auto& parts = **got;
      scored_batch b{std::move(parts[0]), {}, 0};
      for (size_t i = 1; i < parts.size(); ++i) {
        auto s = messages::decode<messages::sample>(parts[i]);
        if (!s) {
          ++malformed;
          continue;
        }
        b.samples.push_back(std::move(*s));
      }
      score_all(b.samples);
      if (b.samples.empty()) continue;
      pending.emplace(std::move(b));
    }
    if (auto g = gone_shards.find(pending->shard); g != gone_shards.end()) {
      if (steady_ms() < g->second) {
        // Their unit's lease is expired or will be: the unit is re-run.
        dropped_for_gone += pending->samples.size() - pending->sent;
        pending.reset();
        continue;
      }
      gone_shards.erase(g);  // look again: these samples wait for credit, then are re-checked
    }
    auto& p = ctx->producers[pending->shard];
    if (!p) {
      auto c = ledger::sample_producer::connect(ctx->zmq, pending->shard, ctx->name);
      if (!c) {
        log->error("connect to shard {}: {}", pending->shard, c.err().to_string());
        pending.reset();
        continue;
      }
      p = std::move(*c);
    }
    auto n = p->try_send_some(pending->samples, pending->sent);
    if (n) {
      pending->sent += *n;
      if (pending->sent == pending->samples.size()) pending.reset();
      blocked_since = 0;
    } else if (n.err().code == errc::capacity_exceeded) {
      // Wait for credit, but not on a dead shard: its unit's lease is expired anyway.
      if (!blocked_since) blocked_since = steady_ms();
      if (steady_ms() - blocked_since > 1000) {
        blocked_since = steady_ms();
        if (known_gone(self, *ctx, node_role::buffer, pending->shard)) {
          log->warn("shard {} is gone: dropping its samples for {} s (first: unit {})",
                    pending->shard, kLookAgainMs / 1000, pending->samples[pending->sent].work_unit);
          gone_shards[pending->shard] = steady_ms() + kLookAgainMs;
          ctx->producers.erase(pending->shard);
          dropped_for_gone += pending->samples.size() - pending->sent;
          pending.reset();
          continue;
        }
      }
      (void)p->poll(20);
    } else {
      log->error("forward to {}: {}", pending->shard, n.err().to_string());
      pending.reset();
    }
  }
}

// ---- buffer shard -------------------------------------------------------------------------

namespace {

// Sends the shard's acks and (when `consumed` is given) hand-out steps, oldest first, at most
// kMaxShardReports in one durable call (one call per item kept the shard loop from its socket
// for a quarter of its time), and removes what the coordinator answered. False when it did
// not answer (gone or timed out): everything is kept for the next try. A refused item (the
// ledger's verdict) is logged and not sent again, as a refused single call always was.
bool send_shard_reports(caf::blocking_actor* self, node_context& ctx,
                        std::deque<ledger::shard_ack>& acks,
                        std::deque<ledger::consumption>* consumed) {
  constexpr size_t kMaxShardReports = 512;
  const size_t num_acks = std::min(acks.size(), kMaxShardReports);
  const size_t num_steps =
      consumed ? std::min(consumed->size(), kMaxShardReports - num_acks) : size_t{0};
  const std::vector<ledger::shard_ack> ack_part(acks.begin(), acks.begin() + num_acks);
  std::vector<ledger::consumption> step_part;
  if (consumed) step_part.assign(consumed->begin(), consumed->begin() + num_steps);
  auto res = call_coordinator(
      self, ctx,
      caf::make_message(shardrep_atom::value, ledger::encode_shard_reports(ack_part, step_part)));
  if (!res && (res.err().code == errc::peer_dead || res.err().code == errc::timeout)) return false;
  auto log = logger("buffer");
  std::optional<messages::shard_reports_reply> reply;
  if (res) {
    if (auto r = messages::decode<messages::shard_reports_reply>(*res); r)
      reply = std::move(*r);
    else
      log->error("the coordinator's answer to {} report(s): {}", num_acks + num_steps,
                 r.err().to_string());
  } else {
    log->error("{} report(s) refused: {}", num_acks + num_steps, res.err().to_string());
  }
  auto why = [&](size_t i) -> const std::string* {
    return reply && i < reply->errors.size() && !reply->errors[i].empty() ? &reply->errors[i]
                                                                          : nullptr;
  };
  for (size_t i = 0; i < num_acks; ++i)
    if (auto w = why(i))
      log->warn("ack of unit {} attempt {} refused: {}", ack_part[i].unit, ack_part[i].attempt, *w);
  for (size_t i = 0; i < num_steps; ++i)
    if (auto w = why(num_acks + i))
      log->error("consumption of unit {} group {} refused: {}", step_part[i].unit,
                 step_part[i].group, *w);
  acks.erase(acks.begin(), acks.begin() + num_acks);
  if (consumed) consumed->erase(consumed->begin(), consumed->begin() + num_steps);
  return true;
}

}  // namespace

void shard_loop(caf::blocking_actor* self, std::shared_ptr<node_context> ctx) {
  running_guard g(ctx->workers_running);
  auto log = logger("buffer");
  auto& svc = *ctx->shard;
  std::deque<ledger::shard_ack> acks;
  std::deque<ledger::consumption> consumed;
  int64_t last_stats = 0, last_err = 0;
  while (mailbox_ok(self, *ctx, 0)) {
    {
      std::lock_guard<std::mutex> lk(ctx->events_mu);
      for (auto& e : ctx->events) svc.shard().apply(e);
      ctx->events.clear();
    }
    if (ctx->policy_version > svc.shard().policy_version())
      svc.shard().set_policy_version(ctx->policy_version);
    // Serve only while the coordinator surely counts this shard alive (LEDGER.md, "Losing a
    // buffer shard"): once it may have declared it lost, its groups are being re-opened.
    if (auto why_not = ctx->trust.why_not(steady_ms()); why_not.empty() != svc.serving()) {
      svc.set_serving(why_not.empty());
      if (why_not.empty())
        log->info("serving trainers again: the coordinator accepted this shard");
      else
        log->warn("stopped serving trainers: {}", why_not);
    }
    auto r = svc.pump(10);
    if (!r && steady_ms() - last_err > 2000) {
      log->error("shard pump: {}", r.err().to_string());
      last_err = steady_ms();
    }
    for (auto& a : svc.take_acks()) acks.push_back(std::move(a));
    for (auto& c : svc.take_consumed()) consumed.push_back(c);
    // A trainer consumer the coordinator declared lost: after the pump, so what the trainer
    // sent before it went (a drained trainer's last confirmations) is taken first, and after
    // every hand-out step taken so far, so a group's `returned` follows its `handed`.
    {
      std::lock_guard<std::mutex> lk(ctx->events_mu);
      for (auto& [consumer, bound] : ctx->lost_consumers) {
        auto released = svc.shard().consumer_lost(consumer, bound);
        if (!released.empty())
          log->warn("trainer consumer {} lost: {} handed group(s) go back", consumer,
                    released.size());
        for (auto& c : released) consumed.push_back(c);
      }
      ctx->lost_consumers.clear();
    }
    // Acks and consumption must reach the ledger: keep them until the coordinator answered.
    // Hand-out steps go out only on the same proof as serving: a shard the coordinator may
    // have declared lost keeps them (a fenced one exits with them), so a hand-out made before
    // a stall is not reported after its group was re-opened.
    while (!acks.empty() || (!consumed.empty() && svc.serving()))
      if (!send_shard_reports(self, *ctx, acks, svc.serving() ? &consumed : nullptr)) break;
    if (steady_ms() - last_stats > 500) {
      last_stats = steady_ms();
      auto st = svc.shard().stats().to_json();
      st["ready_groups"] = svc.shard().num_ready_groups();
      st["free_samples"] = svc.shard().free_samples();
      st["capacity_samples"] = svc.shard().options().capacity_samples;
      st["credits_outstanding"] = svc.credits_outstanding();
      st["zmq_refused_connections"] = zmq_refused_connections(*ctx);
      if (auto c = ctx->coordinator()) self->send(c, stats_atom::value, ctx->id, st.dump());
    }
    if (ctx->draining() && acks.empty() && consumed.empty() &&
        (svc.shard().stats().resident_samples == 0 || unix_now_ms() > ctx->drain_by_ms.load()))
      return;  // flushed (or out of time: the coordinator re-opens what this shard held)
  }
}

// ---- weights -------------------------------------------------------------------------

namespace {

// A version announced that this cache does not hold (the trainer pushed it to another cache)
// is copied from a cache that does, on its own thread so serving never waits for it; one
// copy at a time. No store fallback here: readers that miss every cache read the store.
class cache_replicator {
 public:
  explicit cache_replicator(node_context& ctx)
      : ctx_(ctx),
        reader_(ctx.zmq, static_cast<int>(ctx.cfg.get_int("weights.request_timeout_ms")),
                ctx.cfg.get_bool("weights.same_host_shm")),
        chunk_bytes_(static_cast<uint64_t>(ctx.cfg.get_int("weights.chunk_bytes"))) {}
  ~cache_replicator() {
    if (thread_.joinable()) thread_.join();
  }
  void poke() {
    if (busy_) return;
    auto& cache = ctx_.weights_server->cache();
    const uint64_t v = ctx_.weight_caches->announced();
    // A sharded version may sit in several caches, a shard in each: copy the shards missing.
    if (v == 0 || cache.newest() > v || cache.complete(v) || v == failed_) return;
    if (thread_.joinable()) thread_.join();
    busy_ = true;
    thread_ = std::thread([this, v, &cache] {
      auto got = reader_.fetch_shards(v, ctx_.weight_caches->caches());
      if (got) {
        for (auto& s : *got) {
          if (cache.find(v, s.shard)) continue;
          auto cv = weights::make_cached_version(v, s.bytes, chunk_bytes_);
          cv.shard = s.shard;
          cv.num_shards = s.num_shards;
          cv.version_hash = s.version_hash;
          if (auto st = cache.insert(std::move(cv)); !st)
            logger("weights")->warn("copy of policy version {}: {}", v, st.err().to_string());
        }
      } else {
        failed_ = v;  // not again for this version: the next announcement tries anew
        logger("weights")->info("policy version {} is in no other cache ({})", v,
                                got.err().message);
      }
      busy_ = false;
    });
  }
  weights::reader_counters counters() const { return busy_ ? last_ : (last_ = reader_.counters()); }

 private:
  node_context& ctx_;
  weights::version_reader reader_;
  uint64_t chunk_bytes_;
  std::atomic<bool> busy_{false};
  std::atomic<uint64_t> failed_{0};
  mutable weights::reader_counters last_;
  std::thread thread_;
};

}  // namespace

void weights_loop(caf::blocking_actor* self, std::shared_ptr<node_context> ctx) {
  running_guard g(ctx->workers_running);
  auto log = logger("weights");
  auto& server = *ctx->weights_server;
  cache_replicator replicator(*ctx);
  uint64_t newest_logged = 0;
  int64_t last_stats = 0, last_err = 0;
  bool keep = true;
  while (keep && !ctx->stopping && !ctx->draining()) {
    self->receive([&](shutdown_atom) { keep = false; },
                  [&](version_atom) -> uint64_t { return ctx->policy_version.load(); },
                  caf::after(std::chrono::milliseconds(0)) >> [] {});
    if (auto st = server.poll(20); !st && steady_ms() - last_err > 2000) {
      last_err = steady_ms();
      log->error("cache server: {}", st.err().to_string());
    }
    replicator.poke();
    if (const uint64_t newest = server.cache().newest(); newest != newest_logged) {
      newest_logged = newest;
      log->info("holds policy version {} (versions {}, {} bytes)", newest,
                server.cache().versions().size(), server.cache().num_bytes());
    }
    if (steady_ms() - last_stats > 1000) {
      last_stats = steady_ms();
      nlohmann::json held = nlohmann::json::object();
      for (uint64_t v : server.cache().versions())
        if (auto cv = server.cache().find(v)) held[std::to_string(v)] = (*cv)->held_unix_ms;
      nlohmann::json st{{"version", newest_logged},
                        {"versions_seen", server.counters().num_versions_put},
                        {"versions", server.cache().versions()},
                        {"cache_bytes", server.cache().num_bytes()},
                        {"evicted", server.cache().num_evicted()},
                        {"load", server.load()},
                        {"server", server.counters().to_json()},
                        {"copied", replicator.counters().to_json()},
                        {"held_unix_ms", held},
                        {"zmq_refused_connections", zmq_refused_connections(*ctx)},
                        {"timeline", node_timeline(*ctx)}};
      if (auto c = ctx->coordinator()) self->send(c, stats_atom::value, ctx->id, st.dump());
    }
  }
}

}  // namespace moerl::actors
