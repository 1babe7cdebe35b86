#include "actors/internal/node_roles.h"

#include <algorithm>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/atoms.h"
#include "actors/internal/monitored_ask.h"
#include "actors/internal/role_loops.h"
#include "common/status_try.h"
#include "messages/admin.h"

namespace moerl::actors {

using namespace std::chrono;

int64_t steady_ms() {
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

uint32_t micros_since(steady_clock::time_point t0) {
  auto us = duration_cast<microseconds>(steady_clock::now() - t0).count();
  return static_cast<uint32_t>(std::clamp<int64_t>(us, 0, UINT32_MAX));
}

bool mailbox_ok(caf::blocking_actor* self, node_context& ctx, int64_t wait_ms) {
  // The role loops look at their mailbox on every pass (the shard loop after each 10 ms
  // pump), nearly always empty: a receive with a 0 ms timeout still blocked the mailbox, took
  // its mutex, waited on its condition variable until a deadline already passed (a futex
  // call) and made the next sender wake it; ~9% of a buffer shard's CPU (issue 27).
  if (wait_ms <= 0 && self->mailbox().empty()) return !ctx.stopping.load();
  bool keep = true;
  self->receive([&](shutdown_atom) { keep = false; }, caf::after(milliseconds(wait_ms)) >> [] {});
  return keep && !ctx.stopping.load();
}

result<std::string> call_coordinator(caf::blocking_actor* self, node_context& ctx,
                                     caf::message request) {
  auto coord = ctx.coordinator();
  if (!coord) return error(errc::peer_dead, "not connected to the coordinator");
  // Asked from a scoped actor no other question uses (monitored_ask.h): a dropped link ends
  // the wait at once, not after request_timeout_ms.
  monitored_ask_options opt;
  opt.timeout = milliseconds(ctx.cp.request_timeout_ms);
  opt.what = "the coordinator";
  ASSIGN_OR_RETURN(auto raw, ctx.coordinator_askers.ask<std::string>(self->system(), coord,
                                                                     std::move(request), opt));
  return coordinator_reply(std::move(raw));
}

result<std::string> coordinator_reply(std::string raw) {
  if (!raw.empty()) {
    auto k = messages::peek_kind(raw.data(), raw.size());
    if (k && *k == messages::kind::error) {
      auto e = messages::decode<messages::wire_error>(raw);
      return e ? e->value : e.err();
    }
  }
  return raw;
}

result<std::vector<std::string>> discover(caf::blocking_actor* self, node_context& ctx,
                                          node_role role) {
  messages::admin_request req;
  req.token = ctx.cfg.get_string("console.token");
  req.command = "nodes";
  // Only the endpoints matter here: without it each reply carried every node's whole stats,
  // their per-iteration lists included (~400 KB by iteration 800 of the default run), built,
  // sent and parsed several times a second by the nodes' discovery loops (issue 27).
  req.options.emplace_back("history", "0");
  ASSIGN_OR_RETURN(
      auto raw,
      call_coordinator(self, ctx, caf::make_message(admin_atom::value, messages::encode(req))));
  ASSIGN_OR_RETURN(auto rep, messages::decode<messages::admin_reply>(raw));
  if (!rep.ok) return error(errc::internal, "coordinator refused `nodes`: " + rep.body_json);
  auto j = nlohmann::json::parse(rep.body_json, nullptr, false);
  if (!j.is_array())
    return error(errc::malformed_message, "coordinator's `nodes` reply is not a JSON array");
  std::vector<std::string> out;
  for (auto& n : j)
    if (n.value("role", "") == to_string(role) && n.value("state", "") == "running" &&
        !n.value("endpoint", "").empty())
      out.push_back(n["endpoint"].get<std::string>());
  return out;
}

bool known_gone(caf::blocking_actor* self, node_context& ctx, node_role role,
                const std::string& endpoint) {
  auto alive = discover(self, ctx, role);
  return alive && std::find(alive->begin(), alive->end(), endpoint) == alive->end();
}

void cache_directory_loop(caf::blocking_actor* self, std::shared_ptr<node_context> ctx) {
  auto& dir = *ctx->weight_caches;
  int64_t next_discovery = 0;
  while (mailbox_ok(self, *ctx, 100)) {
    dir.announce(ctx->policy_version.load());
    if (steady_ms() < next_discovery) continue;
    auto alive = discover(self, *ctx, node_role::weights);
    // Unanswered: keep the last list (a coordinator restart is no reason to forget the caches).
    next_discovery = steady_ms() + (alive ? 1000 : 200);
    if (alive) dir.set_caches(std::move(*alive));
    if (dir.peer())  // fan-out: the rollout nodes present, each serving its peers
      if (auto readers = discover(self, *ctx, node_role::rollout))
        dir.set_readers(std::move(*readers));
  }
}

nlohmann::json node_timeline(const node_context& ctx) {
  return {{"start_unix_ms", ctx.started_unix_ms},
          {"join_unix_ms", ctx.joined_unix_ms.load()},
          {"first_commit_unix_ms", ctx.first_commit_unix_ms.load()}};
}

uint64_t zmq_refused_connections(const node_context& ctx) {
  return ctx.zmq ? ctx.zmq->num_refused_connections() : 0;
}

void fail_actor(caf::blocking_actor* self, const std::string& why) {
  self->fail_state(caf::make_error(caf::sec::runtime_error, why));
}

restart_strategy role_strategy(node_role role) {
  return role == node_role::trainer ? restart_strategy::one_for_all : restart_strategy::one_for_one;
}

namespace {

// A child running `loop(self, args...)` as a blocking actor, restarted only after a crash.
template <class Loop, class... Args>
child_spec loop_child(std::string id, Loop loop, Args... args) {
  return {std::move(id),
          [loop, args...](caf::actor_system& sys) {
            return sys.spawn([loop, args...](caf::blocking_actor* self) { loop(self, args...); });
          },
          restart_policy::transient};
}

}  // namespace

std::vector<child_spec> role_children(const std::shared_ptr<node_context>& ctx) {
  std::vector<child_spec> kids;
  if (ctx->weight_caches) kids.push_back(loop_child("cache-directory", cache_directory_loop, ctx));
  switch (ctx->role) {
    case node_role::rollout: {
      auto n =
          static_cast<uint32_t>(std::max<int64_t>(1, ctx->cfg.get_int("actors.rollout_workers")));
      for (uint32_t k = 0; k < n; ++k)
        kids.push_back(loop_child("rollout-" + std::to_string(k), rollout_loop, ctx, k));
      break;
    }
    case node_role::reward: kids.push_back(loop_child("scorer", reward_loop, ctx)); break;
    case node_role::buffer: kids.push_back(loop_child("shard", shard_loop, ctx)); break;
    case node_role::trainer: {
      auto n =
          static_cast<uint32_t>(std::max<int64_t>(1, ctx->cfg.get_int("actors.trainer_ranks")));
      kids.push_back(loop_child("rank-0", trainer_driver_loop, ctx, n));
      for (uint32_t r = 1; r < n; ++r)
        kids.push_back(loop_child("rank-" + std::to_string(r), trainer_rank_loop, ctx, r));
      break;
    }
    case node_role::weights: kids.push_back(loop_child("versions", weights_loop, ctx)); break;
    case node_role::env: {
      kids.push_back(loop_child("env-router", env_router_loop, ctx));
      auto n = static_cast<uint32_t>(std::max<int64_t>(1, ctx->cfg.get_int("env.workers")));
      for (uint32_t k = 0; k < n; ++k)
        kids.push_back(loop_child("env-" + std::to_string(k), env_worker_loop, ctx, k));
      break;
    }
    case node_role::coordinator:
      break;  // the coordinator runs no role children (node_runtime.cpp runs it)
  }
  return kids;
}

}  // namespace moerl::actors
