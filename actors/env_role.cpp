// The env role (env/ENV.md): one router actor owns the node's ROUTER socket and hands
// each session to one of env.workers environment actors, supervised one-for-one. A session
// stays on the environment actor that opened it; when that actor crashes, its restarted
// incarnation knows none of its sessions and answers "unknown session", so those episodes
// fail cleanly while the node keeps serving the others.
#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <thread>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/atoms.h"
#include "actors/internal/role_loops.h"
#include "actors/internal/worker_options.h"
#include "actors/interruption.h"
#include "common/log.h"
#include "env/env_server.h"
#include "workers/external_environment.h"

namespace moerl::actors {
namespace {

using nlohmann::json;

std::string error_reply(uint64_t id, const std::string& why, uint64_t num_sessions) {
  return json{{"id", id}, {"ok", false}, {"error", why}, {"sessions", num_sessions}}.dump();
}

// env.step_latency_ms with its distribution: emulates a slow environment (a simulator, a
// sandboxed tool call) so the timeline shows when the environment dominates.
class step_latency {
 public:
  explicit step_latency(const config& cfg)
      : mean_ms_(cfg.get_double("env.step_latency_ms")),
        dist_(cfg.get_string("env.step_latency_dist")),
        rng_(std::random_device{}()) {}
  void wait() {
    if (mean_ms_ <= 0) return;
    double ms = mean_ms_;
    if (dist_ == "uniform") ms = std::uniform_real_distribution<double>(0, 2 * mean_ms_)(rng_);
    if (dist_ == "exponential") ms = std::exponential_distribution<double>(1 / mean_ms_)(rng_);
    std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(ms * 1000)));
  }

 private:
  double mean_ms_;
  std::string dist_;
  std::mt19937_64 rng_;
};

json observation_json(const env::env_observation& o) {
  return {{"observation", o.tokens}, {"reward", o.reward}, {"done", o.done}};
}

// An env node keeps serving through a drain until its deadline: the episodes open on it
// belong to units that rollout workers are finishing.
bool serving(const node_context& ctx) {
  return !ctx.stopping && !(ctx.draining() && unix_now_ms() > ctx.drain_by_ms.load());
}

}  // namespace

// One environment actor: the episodes of the sessions the router gave it.
void env_worker_loop(caf::blocking_actor* self, std::shared_ptr<node_context> ctx, uint32_t index) {
  running_guard g(ctx->workers_running);
  {
    std::lock_guard<std::mutex> lk(ctx->env_mu);
    ctx->env_workers[index] = caf::actor_cast<caf::actor>(self);
  }
  auto log = logger("env");
  std::map<uint64_t, std::unique_ptr<env::environment>> episodes;  // by session
  step_latency latency(ctx->cfg);
  const int64_t crash_every = ctx->cfg.get_int("env.crash_every_steps");
  // env.worker: this actor's episodes are sessions in a user's process (python/WORKERS.md).
  std::shared_ptr<workers::env_host> external;
  if (const auto spec = ctx->cfg.get_string("env.worker"); !spec.empty()) {
    auto o = worker_options_from_config<workers::env_host_options>(ctx->cfg, spec);
    o.timeout_ms = ctx->cfg.get_int("env.worker_timeout_ms");
    auto h = workers::env_host::create(std::move(o));
    if (!h) {
      fail_actor(self, h.err().to_string());
      return;
    }
    external = std::move(*h);
  }
  int64_t num_steps = 0;
  bool keep = true, crashed = false;
  while (keep && serving(*ctx)) {
    self->receive(
        [&](shutdown_atom) { keep = false; },
        [&](env_atom, const std::string& client, const std::string& request, uint64_t session) {
          auto router = caf::actor_cast<caf::actor>(self->current_sender());
          auto answer = [&](const json& body, bool ended) {
            self->send(router, env_reply_atom::value, client, body.dump(), session, ended);
          };
          const json req = json::parse(request);  // the router parsed it already
          const uint64_t id = req.value("id", uint64_t{0});
          const std::string op = req.value("op", "");
          auto refuse = [&](const std::string& why, bool ended) {
            answer(json{{"id", id}, {"ok", false}, {"error", why}}, ended);
          };
          if (op == "close") {
            episodes.erase(session);
            answer(json{{"id", id}, {"ok", true}, {"done", true}}, true);
            return;
          }
          if (op == "reset") {
            const std::string task = req.value("task", "");
            auto env = external ? result<std::unique_ptr<env::environment>>(
                                      workers::make_external_environment(external, session, task))
                                : ctx->running_job->make_environment(task);
            if (!env) return refuse(env.err().message, true);
            auto o = (*env)->reset(req.value("seed", uint64_t{0}));
            if (!o) return refuse(o.err().message, true);
            episodes[session] = std::move(*env);
            json body = observation_json(*o);
            body["id"] = id;
            body["ok"] = true;
            body["session"] = session;
            return answer(body, false);
          }
          auto it = episodes.find(session);
          if (it == episodes.end())
            return refuse("unknown session " + std::to_string(session) +
                              " (it ended, or its environment restarted)",
                          true);
          std::vector<uint32_t> action;
          for (const auto& t : req.at("action")) action.push_back(t.get<uint32_t>());
          latency.wait();
          auto o = it->second->step(action);
          if (!o)
            return refuse("step of session " + std::to_string(session) + ": " + o.err().message,
                          false);  // a refused action leaves the episode as it was
          if (o->done) episodes.erase(it);
          json body = observation_json(*o);
          body["id"] = id;
          body["ok"] = true;
          answer(body, o->done);
          if (crash_every > 0 && ++num_steps % crash_every == 0) {
            log->warn("environment {} crashing on purpose (env.crash_every_steps {})", index,
                      crash_every);
            crashed = true;
            keep = false;
          }
        },
        caf::after(std::chrono::milliseconds(200)) >> [] {});
  }
  if (crashed) {
    // Unregistered first, so the router answers this actor's sessions at once ("unknown
    // session") instead of sending them into a dead mailbox until the restart registers.
    std::lock_guard<std::mutex> lk(ctx->env_mu);
    ctx->env_workers.erase(index);
  }
  if (crashed) fail_actor(self, "environment crashed (env.crash_every_steps)");
}

// The router: requests from the socket to the environment actors, replies back.
void env_router_loop(caf::blocking_actor* self, std::shared_ptr<node_context> ctx) {
  running_guard g(ctx->workers_running);
  auto log = logger("env");
  auto& server = *ctx->env;
  const uint32_t num_workers = static_cast<uint32_t>(ctx->cfg.get_int("env.workers"));
  const uint64_t max_sessions = static_cast<uint64_t>(ctx->cfg.get_int("env.max_sessions"));
  std::map<uint64_t, uint32_t> session_worker;  // open sessions -> environment actor
  std::vector<uint64_t> num_sessions_of(num_workers, 0);
  // Session ids never repeat on this node, even across a router restart: a late request
  // for an old session must not reach a new one.
  uint64_t next_session = (static_cast<uint64_t>(unix_now_ms()) << 16);
  uint64_t num_requests = 0, num_bad_requests = 0;
  int64_t last_stats = 0, last_err = 0;
  bool keep = true;
  while (keep && serving(*ctx)) {
    auto got = server.poll(1);
    if (!got) {
      if (steady_ms() - last_err > 2000) log->error("env socket: {}", got.err().to_string());
      last_err = steady_ms();
    } else if (*got) {
      ++num_requests;
      const std::string& client = (*got)->first;
      const json req = json::parse((*got)->second, nullptr, false);
      const uint64_t id = req.is_object() && req.contains("id") && req["id"].is_number_unsigned()
                              ? req["id"].get<uint64_t>()
                              : 0;
      auto refuse = [&](const std::string& why) {
        ++num_bad_requests;
        log->warn("env request refused: {}", why);
        (void)server.reply(client, error_reply(id, why, session_worker.size()));
      };
      const std::string op = req.is_object() ? req.value("op", "") : "";
      if (!req.is_object() || !req.contains("id")) {
        refuse("malformed env request: not a JSON object with an unsigned \"id\"");
      } else if (op != "reset" && op != "step" && op != "close") {
        refuse("malformed env request: op '" + op + "' is not reset|step|close");
      } else if (op == "reset" && !(req.contains("task") && req["task"].is_string() &&
                                    req.contains("seed") && req["seed"].is_number_unsigned())) {
        refuse("malformed env reset: it needs a string \"task\" and an unsigned \"seed\"");
      } else if (op != "reset" &&
                 !(req.contains("session") && req["session"].is_number_unsigned())) {
        refuse("malformed env " + op + ": it needs an unsigned \"session\"");
      } else if (op == "step" &&
                 !(req.contains("action") && req["action"].is_array() &&
                   std::all_of(req["action"].begin(), req["action"].end(),
                               [](const json& t) { return t.is_number_unsigned(); }))) {
        refuse("malformed env step: \"action\" must be an array of token ids");
      } else {
        uint64_t session = 0;
        uint32_t w = 0;
        bool routed = true;
        if (op == "reset") {
          if (session_worker.size() >= max_sessions) {
            refuse("env node full: " + std::to_string(max_sessions) +
                   " sessions open (env.max_sessions)");
            routed = false;
          } else {
            session = next_session++;
            for (uint32_t k = 1; k < num_workers; ++k)
              if (num_sessions_of[k] < num_sessions_of[w]) w = k;
            session_worker[session] = w;
            ++num_sessions_of[w];
          }
        } else {
          session = req["session"].get<uint64_t>();
          auto it = session_worker.find(session);
          if (it == session_worker.end()) {
            refuse("unknown session " + std::to_string(session));
            routed = false;
          } else {
            w = it->second;
          }
        }
        caf::actor worker;
        if (routed) {
          std::lock_guard<std::mutex> lk(ctx->env_mu);
          if (auto it = ctx->env_workers.find(w); it != ctx->env_workers.end()) worker = it->second;
        }
        if (routed && !worker) {
          // Its episode died with the environment actor holding it (a reset: none yet).
          --num_sessions_of[w];
          session_worker.erase(session);
          refuse(op == "reset" ? "environment " + std::to_string(w) + " is restarting"
                               : "unknown session " + std::to_string(session) + " (environment " +
                                     std::to_string(w) + " is restarting)");
        } else if (routed) {
          self->send(worker, env_atom::value, client, (*got)->second, session);
        }
      }
    }
    // Replies of the environment actors; a session they ended is released.
    for (bool more = true; more && keep;) {
      self->receive([&](shutdown_atom) { keep = false; },
                    [&](env_reply_atom, const std::string& client, std::string& body,
                        uint64_t session, bool ended) {
                      if (ended) {
                        auto it = session_worker.find(session);
                        if (it != session_worker.end()) {
                          --num_sessions_of[it->second];
                          session_worker.erase(it);
                        }
                      }
                      auto j = json::parse(body);
                      j["sessions"] = session_worker.size();
                      (void)server.reply(client, j.dump());
                    },
                    caf::after(std::chrono::milliseconds(0)) >> [&] { more = false; });
    }
    if (steady_ms() - last_stats > 1000) {
      last_stats = steady_ms();
      json st{{"sessions", session_worker.size()},
              {"requests", num_requests},
              {"bad_requests", num_bad_requests},
              {"bad_frames", server.num_bad_frames()},
              {"zmq_refused_connections", zmq_refused_connections(*ctx)},
              {"workers", num_workers}};
      if (auto c = ctx->coordinator()) self->send(c, stats_atom::value, ctx->id, st.dump());
    }
  }
}

}  // namespace moerl::actors
