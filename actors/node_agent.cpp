#include "actors/internal/node_agent.h"
#include "common/json_text.h"

#include <signal.h>
#include <unistd.h>

#include <thread>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/atoms.h"
#include "actors/caf_setup.h"
#include "actors/internal/control_priority.h"
#include "actors/internal/monitored_ask.h"
#include "actors/internal/node_roles.h"
#include "actors/internal/role_loops.h"
#include "actors/interruption.h"
#include "common/health_file.h"
#include "common/log.h"
#include "ledger/event_codec.h"
#include "messages/admin.h"

namespace moerl::actors {
namespace {

using ms = std::chrono::milliseconds;

struct agent_state {
  std::shared_ptr<node_context> ctx;
  std::shared_ptr<std::atomic<int>> exit_code;
  caf::actor supervisor;
  uint64_t hb_seq = 0;
  bool registered = false;
  bool fenced = false;  // the coordinator declared this node dead: exit kFencedExit
  bool finishing = false;
  messages::interruption_notice notice;  // the one being handled (drain)
  int64_t drain_started_ms = 0;
  int64_t accepted_unix_ms = 0;  // the coordinator last accepted a registration or heartbeat
  bool health_error_logged = false;
};

using agent_actor = caf::stateful_actor<agent_state>;

// Exit status of a node the coordinator fenced (declared dead while it still ran): its pod
// controller or local_job replaces it with a new process, which starts empty.
constexpr int kFencedExit = 5;
// Exit status of a node that gave up (up/pod_policy.h: not replaced, the job fails).
constexpr int kGaveUpExit = 4;

// The coordinator's answer to a registration or heartbeat: "" is accepted, else the error.
moerl::error refusal_in(const std::string& reply) {
  if (reply.empty()) return {};
  auto k = messages::peek_kind(reply.data(), reply.size());
  if (!k || *k != messages::kind::error)
    return moerl::error(errc::malformed_message, "not an error reply");
  auto e = messages::decode<messages::wire_error>(reply);
  return e ? e->value : e.err();
}

// The pod's probes read this (common/health_file.h): rewritten on every tick and while
// joining, so a frozen or hung agent fails its liveness probe by not writing.
void write_health_file(agent_actor* self, const std::string& state) {
  auto& st = self->state;
  const std::string path = st.ctx->cfg.get_string("node.health_file");
  if (path.empty()) return;
  health_record r;
  r.node = st.ctx->name;
  r.role = to_string(st.ctx->role);
  r.pid = ::getpid();
  r.state = st.fenced ? "fenced" : state;
  r.written_unix_ms = unix_now_ms();
  r.accepted_unix_ms = st.accepted_unix_ms;
  if (auto w = write_health(path, r); !w && !st.health_error_logged) {
    st.health_error_logged = true;  // once: a probe reports the rest
    logger("node")->error("{}", w.err().to_string());
  }
}

// The coordinator declared this node dead: stop serving now (trust), log, remember to exit.
void fenced_by_coordinator(agent_actor* self, const std::string& why) {
  self->state.ctx->trust.fence(why);
  self->state.fenced = true;
  write_health_file(self, "fenced");
  logger("node")->error(
      "fenced by the coordinator: {}; exiting ({}) so that a new process "
      "replaces this one",
      why, kFencedExit);
}

messages::heartbeat make_heartbeat(agent_actor* self, const std::string& state) {
  auto& ctx = *self->state.ctx;
  messages::heartbeat hb;
  hb.node = ctx.id;
  hb.role = to_string(ctx.role);
  hb.pid = static_cast<uint32_t>(::getpid());
  hb.seq = ++self->state.hb_seq;
  hb.sent_unix_ms = static_cast<uint64_t>(unix_now_ms());
  hb.state = state;
  hb.leases = ctx.active_units.load();
  hb.restarts = ctx.restarts.load();
  hb.name = ctx.name;
  hb.endpoint = ctx.endpoint;
  return hb;
}

// Blocking on purpose: the agent is detached, and nothing else can happen for this node
// while it has no coordinator.
bool register_once(agent_actor* self, int64_t give_up_ms);

// Retries connect + register until connection_timeout x 10 has passed: a coordinator that
// just restarted may still be recovering its ledger when the first request arrives.
bool connect_and_register(agent_actor* self) {
  auto& ctx = *self->state.ctx;
  auto until = std::chrono::steady_clock::now() + ms(ctx.cp.connection_timeout_ms * 10);
  for (;;) {
    auto left = std::chrono::duration_cast<ms>(until - std::chrono::steady_clock::now()).count();
    write_health_file(self, "joining");
    if (register_once(self, std::max<int64_t>(left, 1))) return true;
    if (self->state.fenced || std::chrono::steady_clock::now() >= until || ctx.stopping)
      return false;
    std::this_thread::sleep_for(ms(200));  // retry pacing
  }
}

bool register_once(agent_actor* self, int64_t give_up) {
  auto& st = self->state;
  auto& ctx = *st.ctx;
  auto log = logger("node");
  auto coord = connect_with_retry(self->system(), ctx.cp, ctx.coord_host, ctx.coord_port, give_up);
  if (!coord) {
    log->error("{}", coord.err().to_string());
    return false;
  }
  ctx.set_coordinator(*coord);
  self->monitor(*coord);
  bool ok = false;
  std::string why;
  auto bytes = messages::encode(make_heartbeat(self, ctx.draining() ? "draining" : "running"));
  const auto link = ctx.trust.current_link();
  const int64_t sent = steady_ms();
  // Asked with the coordinator monitored (monitored_ask.h): at load a link made to re-join can
  // drop at once, and waiting out node.request_timeout_ms (5 s) there outlived the
  // coordinator's re-join grace (2 s).
  caf::scoped_actor blocking{self->system()};
  monitored_ask_options opt;
  opt.timeout = ms(ctx.cp.request_timeout_ms);
  opt.what = "the coordinator (registering)";
  auto answer = ask_monitored<std::string>(
      blocking.ptr(), *coord,
      caf::make_message(register_atom::value, bytes, caf::actor_cast<caf::actor>(self)), opt);
  if (!answer) {
    why = answer.err().message;
  } else {
    auto refused = refusal_in(*answer);
    ok = refused.code == errc::ok;
    if (refused.code == errc::peer_dead) fenced_by_coordinator(self, refused.message);
    why = ok ? "" : "refused: " + refused.to_string();
  }
  if (!ok) {
    log->error("registration with the coordinator failed: {}", why);
  } else {
    ctx.trust.accepted(link, sent);
    st.accepted_unix_ms = unix_now_ms();
    int64_t never = 0;
    ctx.joined_unix_ms.compare_exchange_strong(never, unix_now_ms());
    log->info("registered with coordinator {}:{} as {} ({})", ctx.coord_host, ctx.coord_port,
              ctx.name, ctx.id);
  }
  st.registered = ok;
  return ok;
}

void finish(agent_actor* self, int code) {
  auto& st = self->state;
  if (st.finishing) return;
  st.finishing = true;
  st.ctx->stopping = true;
  *st.exit_code = code;
  if (st.supervisor) {
    self->unlink_from(st.supervisor);
    self->send_exit(st.supervisor, caf::exit_reason::user_shutdown);
  }
  self->quit();
}

// The node cannot go on (its supervisor reached actors.restart_intensity): the coordinator
// records `cause` with the node (its node list and report, where `moerl up` reads why the
// job failed), then the node exits kGaveUpExit. Bounded: without an answer it exits anyway.
void report_and_give_up(agent_actor* self, const std::string& cause) {
  auto& ctx = *self->state.ctx;
  auto c = ctx.coordinator();
  if (!c) return finish(self, kGaveUpExit);
  self->request(c, ms(ctx.cp.request_timeout_ms), gaveup_atom::value, ctx.id, cause)
      .then([self](const std::string&) { finish(self, kGaveUpExit); },
            [self](caf::error&) { finish(self, kGaveUpExit); });
}

// A heartbeat is a request: the answer renews the trust a buffer shard serves on (sent at
// `sent` on `link`), or fences the node.
void send_heartbeat(agent_actor* self) {
  auto& ctx = *self->state.ctx;
  auto c = ctx.coordinator();
  if (!c) return;
  const auto link = ctx.trust.current_link();
  const int64_t sent = steady_ms();
  self->request(c, ms(ctx.cp.request_timeout_ms), heartbeat_atom::value,
                messages::encode(make_heartbeat(self, ctx.draining() ? "draining" : "running")))
      .then(
          [self, link, sent](const std::string& r) {
            auto refused = refusal_in(r);
            if (refused.code == errc::ok) {
              self->state.ctx->trust.accepted(link, sent);
              self->state.accepted_unix_ms = unix_now_ms();
            } else if (refused.code == errc::peer_dead) {
              fenced_by_coordinator(self, refused.message);
              finish(self, kFencedExit);
            } else if (refused.code == errc::unknown_node && self->state.registered) {
              // The coordinator lost our link (it counts us unreachable, "re-join first") while
              // ours stayed up, so no down message will tell us: re-join now, inside its
              // grace, instead of heartbeating into refusals until it declares us dead.
              auto& st = self->state;
              st.ctx->trust.link_lost();
              st.registered = false;
              logger("node")->warn("heartbeat refused ({}); re-joining", refused.message);
              if (!connect_and_register(self)) finish(self, st.fenced ? kFencedExit : 3);
            }
          },
          [](caf::error&) {});  // no answer: the trust runs out, the next heartbeat retries
}

void begin_drain(agent_actor* self, const messages::interruption_notice& n) {
  auto& st = self->state;
  auto& ctx = *st.ctx;
  int64_t margin = ctx.cfg.get_int("actors.drain_margin_ms");
  int64_t by = std::max<int64_t>(static_cast<int64_t>(n.deadline_unix_ms) - margin, 1);
  if (ctx.draining()) {
    // Already draining: one drain per node. A later notice can only bring the deadline
    // forward (a rebalance recommendation's assumed grace, then the Spot notice's real,
    // earlier time); workers read drain_by_ms before each sample, so they adjust.
    if (by < ctx.drain_by_ms.load()) {
      ctx.drain_by_ms = by;
      st.notice.deadline_unix_ms = n.deadline_unix_ms;
      st.notice.reason += "; then " + n.reason;
      logger("node")->warn(
          "interruption ({}: {}) while draining: deadline brought forward to {} ms from now",
          messages::interruption_source_name(n.source), n.reason,
          static_cast<int64_t>(n.deadline_unix_ms) - unix_now_ms());
    }
    return;
  }
  st.notice = n;
  st.drain_started_ms = unix_now_ms();
  ctx.drain_by_ms = by;
  logger("node")->warn("interruption ({}: {}): deadline in {} ms; draining",
                       messages::interruption_source_name(n.source), n.reason,
                       static_cast<int64_t>(n.deadline_unix_ms) - unix_now_ms());
  send_heartbeat(self);
}

void complete_drain(agent_actor* self) {
  auto& st = self->state;
  auto& ctx = *st.ctx;
  nlohmann::json rec{{"source", messages::interruption_source_name(st.notice.source)},
                     {"at", st.notice.issued_unix_ms},
                     {"deadline", st.notice.deadline_unix_ms},
                     {"reason", st.notice.reason},
                     {"units_returned", ctx.units_returned.load()},
                     {"units_finished", ctx.units_finished.load()},
                     {"drain_ms", unix_now_ms() - st.drain_started_ms}};
  logger("node")->info("drain complete: {}", json_text(rec));
  if (auto c = ctx.coordinator()) {
    // Deregistration: wait (bounded) for the coordinator to record it, then exit 0.
    self->request(c, ms(ctx.cp.request_timeout_ms), drained_atom::value, ctx.id, json_text(rec))
        .then([self](const std::string&) { finish(self, 0); },
              [self](caf::error&) { finish(self, 0); });
  } else {
    finish(self, 0);
  }
}

caf::behavior agent_impl(agent_actor* self, std::shared_ptr<node_context> ctx,
                         std::shared_ptr<std::atomic<int>> exit_code) {
  auto& st = self->state;
  st.ctx = ctx;
  st.exit_code = exit_code;
  auto log = logger("node");
  ctx->trust.set_bound_ms(trust_bound_ms(ctx->cfg.get_int("node.heartbeat_interval_ms") *
                                         ctx->cfg.get_int("actors.heartbeat_misses")));
  if (!connect_and_register(self)) {
    *exit_code = st.fenced ? kFencedExit : 3;
    self->quit();
    return {};
  }
  supervisor_options so;
  so.name = std::string(to_string(ctx->role)) + "-supervisor";
  so.strategy = role_strategy(ctx->role);
  so.intensity = ctx->cfg.get_int("actors.restart_intensity");
  so.period_ms = ctx->cfg.get_int("actors.restart_period_ms");
  so.backoff_ms = ctx->cfg.get_int("actors.restart_backoff_ms");
  so.backoff_max_ms = ctx->cfg.get_int("actors.restart_backoff_max_ms");
  so.observer = caf::actor_cast<caf::actor>(self);
  st.supervisor = spawn_supervisor(self->system(), so, role_children(ctx));
  self->link_to(st.supervisor);
  // Detached: this runs on the agent's own thread, which sends the heartbeats. Raised only
  // now: the supervisor's thread (and every role thread it starts) was made from this one
  // and keeps the default priority. CAF's timer thread names itself after it starts, so it
  // is looked for again here.
  const int nice = static_cast<int>(ctx->cfg.get_int("node.control_nice"));
  prioritize_this_thread(nice);
  prioritize_caf_io_threads(self->system(), nice);
  self->set_exit_handler([self](caf::exit_msg& m) {
    if (m.source == self->state.supervisor.address() && !self->state.finishing) {
      // The supervisor gave up (restart intensity): escalate by ending the node non-zero,
      // after telling the coordinator why.
      const std::string cause = error_text(self->system(), m.reason);
      logger("node")->error("supervisor exited: {}", cause);
      self->state.supervisor = nullptr;
      report_and_give_up(self, cause);
    }
  });
  self->set_down_handler([self](caf::down_msg& m) {
    auto& st = self->state;
    if (st.finishing || m.source != st.ctx->coordinator().address()) return;
    // Until a re-join is accepted, the coordinator may be writing this node off: a buffer
    // shard stops serving trainers now.
    st.ctx->trust.link_lost();
    logger("node")->warn("lost the coordinator ({}); not serving until re-joined; reconnecting",
                         self->system().render(m.reason));
    st.ctx->set_coordinator(nullptr);
    st.registered = false;
    if (!connect_and_register(self)) finish(self, st.fenced ? kFencedExit : 3);
  });
  // A message nobody handles (bad input from a peer) is logged, answered with an error and
  // dropped; by default CAF 0.17 would end the actor with unexpected_message.
  // An error sent to us as a plain message (e.g. a peer answering one of our messages with
  // unexpected_message) is logged; by default CAF 0.17 would end the actor with it.
  self->set_error_handler(
      [](caf::error& e) { logger("node")->warn("a peer sent an error: {}", caf::to_string(e)); });
  self->set_default_handler(
      [](caf::scheduled_actor*, caf::message_view& x) -> caf::result<caf::message> {
        logger("node")->warn("dropped an unexpected message: {}",
                             caf::to_string(x.copy_content_to_message()));
        return caf::sec::unexpected_message;
      });
  self->send(self, tick_atom::value);
  return {
      [self](tick_atom) {
        auto& st = self->state;
        auto& ctx = *st.ctx;
        if (st.finishing) return;
        write_health_file(self, ctx.draining() ? "draining" : "running");
        send_heartbeat(self);
        if (ctx.draining() && ctx.workers_running.load() == 0 && ctx.active_units.load() == 0) {
          complete_drain(self);
          return;
        }
        self->delayed_send(self, ms(ctx.draining() ? 50 : ctx.cp.heartbeat_interval_ms),
                           tick_atom::value);
      },
      [self](notice_atom, const std::string& bytes) {
        auto n = messages::decode<messages::interruption_notice>(bytes);
        if (!n) {
          logger("node")->error("undecodable interruption notice: {}", n.err().to_string());
          return;
        }
        begin_drain(self, *n);
      },
      [self](kill_atom, int32_t sig) {
        logger("node")->warn("console injection: raising signal {} in this process", sig);
        ::kill(::getpid(), sig);
      },
      [self](shutdown_atom) {
        logger("node")->info("shutdown requested by the coordinator");
        finish(self, 0);
      },
      [self](event_atom, const std::string& bytes) {
        auto events = ledger::decode_ledger_events(bytes, self->state.ctx->name);
        if (!events) {
          logger("node")->error("ledger events refused: {}", events.err().to_string());
          return;
        }
        std::lock_guard<std::mutex> lk(self->state.ctx->events_mu);
        for (auto& e : *events) self->state.ctx->events.push_back(std::move(e));
      },
      [self](clost_atom, const std::string& consumer, uint64_t incarnation) {
        std::lock_guard<std::mutex> lk(self->state.ctx->events_mu);
        self->state.ctx->lost_consumers.emplace_back(consumer, incarnation);
      },
      [self](version_atom, uint64_t v) {
        auto& pv = self->state.ctx->policy_version;
        if (v > pv) pv = v;
        self->state.ctx->work_may_be_ready();
      },
      [self](restarted_atom, const std::string& child, const std::string& reason, uint64_t total) {
        self->state.ctx->restarts = static_cast<uint32_t>(total);
        logger("node")->warn("restart #{}: {} ({})", total, child, reason);
      },
  };
}

}  // namespace

caf::actor spawn_node_agent(caf::actor_system& sys, std::shared_ptr<node_context> ctx,
                            std::shared_ptr<std::atomic<int>> exit_code) {
  return sys.spawn<caf::detached>(agent_impl, std::move(ctx), std::move(exit_code));
}

}  // namespace moerl::actors
