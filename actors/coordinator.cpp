#include "actors/coordinator.h"

#include <chrono>

#include <caf/all.hpp>

#include "actors/atoms.h"
#include "actors/internal/coordinator_groups.h"
#include "actors/internal/ledger_writer.h"
#include "common/log.h"
#include "ledger/event_codec.h"
#include "messages/admin.h"
#include "store/object_store.h"

namespace moerl::actors {
namespace {

struct coordinator_state {
  std::unique_ptr<coordinator_core> core;
  std::map<std::string, caf::actor> agents;        // node id -> agent
  std::map<caf::actor_addr, std::string> by_addr;  // agent address -> node id
  bool stopping = false;
  // Group commit: replies whose ledger records are not durable yet, answered by the next
  // successful flush; flush_atom is in our mailbox iff flush_queued.
  using replies = std::vector<std::pair<caf::typed_response_promise<std::string>, std::string>>;
  replies waiting;
  bool flush_queued = false;
  // The batch being written by `writer` (ledger_writer.h) and the replies it makes durable;
  // a flush asked for meanwhile starts when it is back (synced_atom).
  std::unique_ptr<ledger_writer> writer;  // after `core`: joined before the ledger goes
  bool writing = false;
  replies replies_written;
  group_gathers gathers;  // group all-gathers waiting for their round (coordinator_groups.h)
  std::chrono::steady_clock::time_point last_tick = std::chrono::steady_clock::now();
};

using coord_actor = caf::stateful_actor<coordinator_state>;

// The core's typed results as reply bytes, at the edge: the message or "" on success, else
// the encoded moerl::error.
template <class T>
std::string reply_bytes(const result<T>& r) {
  return r ? messages::encode(*r) : encode_error(r.err().code, r.err().message);
}
std::string reply_bytes(const status& st) {
  return st ? std::string() : encode_error(st.err().code, st.err().message);
}

void deliver(coord_actor* self) {
  auto& st = self->state;
  // Shard events leave as one message per node (ledger::encode_ledger_events); a node's batch is
  // sent before anything else to that node, so the order each node sees stays the core's order.
  std::map<std::string, std::vector<ledger::ledger_event>> events;
  auto send_events = [&](const std::string& node) {
    auto e = events.find(node);
    if (e == events.end()) return;
    if (auto it = st.agents.find(node); it != st.agents.end())
      self->send(it->second, event_atom::value, ledger::encode_ledger_events(e->second));
    events.erase(e);
  };
  for (auto& o : st.core->take_outbound()) {
    auto it = st.agents.find(o.node);
    if (it == st.agents.end()) continue;
    if (o.what == outbound::kind::shard_event) {
      events[o.node].push_back(std::move(o.event));
      continue;
    }
    send_events(o.node);
    auto& a = it->second;
    switch (o.what) {
      case outbound::kind::shard_event: break;  // batched above
      case outbound::kind::policy_version: self->send(a, version_atom::value, o.version); break;
      case outbound::kind::notice:
        self->send(a, notice_atom::value, messages::encode(o.notice));
        break;
      case outbound::kind::signal:
        self->send(a, kill_atom::value, static_cast<int32_t>(o.signal));
        break;
      case outbound::kind::shutdown: self->send(a, shutdown_atom::value); break;
      case outbound::kind::consumer_lost:
        self->send(a, clost_atom::value, o.consumer, o.version);
        break;
    }
  }
  while (!events.empty()) send_events(events.begin()->first);
  if (st.core->shutdown_requested() && !st.stopping) {
    st.stopping = true;
    // Give the shutdown messages time to leave before the middleman goes down.
    self->delayed_send(self, std::chrono::milliseconds(500), shutdown_atom::value);
  }
}

// Puts flush_atom at the back of our mailbox (once): every request already queued is
// handled before it, so one sync() covers all of them (LEDGER.md: group commit).
void schedule_flush(coord_actor* self) {
  auto& st = self->state;
  if (st.flush_queued || (!st.core->flush_due() && st.waiting.empty())) {
    deliver(self);  // nothing to sync; messages that need no durability go out now
    return;
  }
  st.flush_queued = true;
  self->send(self, flush_atom::value);
}

// The batch is back: its replies and events go out if it is durable; otherwise they wait
// (its records are back in front of the tail) and the next tick retries.
void finish_flush(coord_actor* self, ledger::work_ledger::sync_batch batch, const status& written) {
  auto& st = self->state;
  if (st.core->end_flush(std::move(batch), written)) {
    for (auto& [rp, reply] : st.replies_written) rp.deliver(std::move(reply));
  } else {
    st.waiting.insert(st.waiting.begin(), std::make_move_iterator(st.replies_written.begin()),
                      std::make_move_iterator(st.replies_written.end()));
  }
  st.replies_written.clear();
  deliver(self);
}

// Starts a group commit: the ledger's tail as one batch, written by the writer thread (or
// here, when there is nothing to write or no writer: tests without a store); the replies
// waiting so far go out when it is durable (synced_atom).
void start_flush(coord_actor* self) {
  auto& st = self->state;
  st.core->count_message("flush");  // one group commit (a flush_atom while one is out waits)
  auto batch = st.core->begin_flush();
  if (!batch) {
    logger("coordinator")->error("{}", batch.err().to_string());
    deliver(self);
    return;
  }
  st.replies_written = std::move(st.waiting);
  st.waiting.clear();
  if (!st.writer || batch->write == ledger::work_ledger::sync_batch::how::nothing) {
    // Nothing to wait for but a snapshot (rare): written here rather than handed over.
    status written = st.core->ledger_store()
                         ? ledger::work_ledger::write_sync(*st.core->ledger_store(), *batch)
                         : ok_status();
    finish_flush(self, std::move(*batch), written);
    return;
  }
  st.writing = st.writer->start(*batch);
  if (!st.writing)  // cannot happen (one batch at a time); the records go back to the tail
    finish_flush(self, std::move(*batch),
                 error(errc::invalid_argument, "ledger writer: the previous batch is not taken"));
}

// Answers a request once the ledger records it caused are durable (write-ahead contract).
caf::result<std::string> reply_durable(coord_actor* self, std::string reply) {
  auto rp = self->make_response_promise<std::string>();
  self->state.waiting.emplace_back(rp, std::move(reply));
  schedule_flush(self);
  return rp;
}

caf::behavior coordinator_impl(coord_actor* self,
                               std::shared_ptr<std::unique_ptr<coordinator_core>> init) {
  self->state.core = std::move(*init);
  self->state.core->set_group_commit(true);
  if (auto* store = self->state.core->ledger_store())
    self->state.writer = std::make_unique<ledger_writer>(*store, [addr = self->address()] {
      if (auto me = caf::actor_cast<caf::actor>(addr)) caf::anon_send(me, synced_atom::value);
    });
  auto log = logger("coordinator");
  self->set_down_handler([self](caf::down_msg& m) {
    auto& st = self->state;
    auto it = st.by_addr.find(m.source);
    if (it == st.by_addr.end()) return;
    auto node = it->second;
    st.by_addr.erase(it);
    st.agents.erase(node);
    st.core->link_lost(node, "monitor: " + self->system().render(m.reason));
    schedule_flush(self);
  });
  // A message nobody handles (bad input from a peer) is logged, answered with an error and
  // dropped; by default CAF 0.17 would end the actor with unexpected_message.
  // An error sent to us as a plain message (e.g. a peer answering one of our messages with
  // unexpected_message) is logged; by default CAF 0.17 would end the actor with it.
  self->set_error_handler([](caf::error& e) {
    logger("coordinator")->warn("a peer sent an error: {}", caf::to_string(e));
  });
  self->set_default_handler([](caf::scheduled_actor*,
                               caf::message_view& x) -> caf::result<caf::message> {
    logger("coordinator")
        ->warn("dropped an unexpected message: {}", caf::to_string(x.copy_content_to_message()));
    return caf::sec::unexpected_message;
  });
  self->send(self, tick_atom::value);
  return {
      [self](register_atom, const std::string& bytes,
             caf::actor agent) -> caf::result<std::string> {
        self->state.core->count_message("register");
        auto hb = messages::decode<messages::heartbeat>(bytes);
        if (!hb) return encode_error(hb.err().code, "register: " + hb.err().message);
        auto st = self->state.core->register_node(*hb);
        if (!st) return encode_error(st.err().code, st.err().message);
        if (agent) {
          auto& s = self->state;
          if (auto old = s.agents.find(hb->node); old != s.agents.end())
            s.by_addr.erase(old->second.address());
          s.agents[hb->node] = agent;
          s.by_addr[agent.address()] = hb->node;
          self->monitor(agent);
        }
        return reply_durable(self, "");
      },
      // Answered: "" means the node is counted alive (a buffer shard serves on that proof,
      // coordinator_trust.h); peer_dead ("fenced") tells a node declared dead to exit.
      [self](heartbeat_atom, const std::string& bytes) -> std::string {
        self->state.core->count_message("heartbeat");
        auto hb = messages::decode<messages::heartbeat>(bytes);
        if (!hb) return encode_error(hb.err().code, "heartbeat: " + hb.err().message);
        auto st = self->state.core->heartbeat(*hb);
        return st ? std::string() : encode_error(st.err().code, st.err().message);
      },
      [self](lease_atom, const std::string& bytes) -> caf::result<std::string> {
        self->state.core->count_message("lease");
        auto req = messages::decode<messages::lease_request>(bytes);
        if (!req) return encode_error(req.err().code, "lease request: " + req.err().message);
        return reply_durable(self, reply_bytes(self->state.core->lease(*req)));
      },
      [self](leases_atom, const std::string& bytes) -> caf::result<std::string> {
        self->state.core->count_message("leases");
        auto req = messages::decode<messages::lease_request>(bytes);
        if (!req) return encode_error(req.err().code, "lease request: " + req.err().message);
        return reply_durable(self, reply_bytes(self->state.core->lease_batch(*req)));
      },
      [self](giveback_atom, const std::string& bytes) -> caf::result<std::string> {
        self->state.core->count_message("giveback");
        auto back = messages::decode<messages::lease_give_back>(bytes);
        if (!back) return encode_error(back.err().code, "give back: " + back.err().message);
        return reply_durable(self, reply_bytes(self->state.core->give_back(*back)));
      },
      [self](flush_atom) {
        auto& st = self->state;
        st.flush_queued = false;
        if (st.writing) {
          // synced_atom starts the next batch; messages that are not ledger events go out.
          deliver(self);
          return;
        }
        start_flush(self);
      },
      [self](synced_atom) {
        auto& st = self->state;
        auto back = st.writer ? st.writer->take() : std::nullopt;
        if (!back) return;
        st.writing = false;
        const bool durable = static_cast<bool>(back->second);
        // A failed write is retried by the next tick, not at once (the store is failing).
        finish_flush(self, std::move(back->first), back->second);
        if (durable) schedule_flush(self);  // what arrived while it was written
      },
      [self](report_atom, const std::string& bytes) -> caf::result<std::string> {
        self->state.core->count_message("report");
        auto rep = messages::decode<messages::unit_report>(bytes);
        if (!rep) return encode_error(rep.err().code, "unit report: " + rep.err().message);
        return reply_durable(self, reply_bytes(self->state.core->report(*rep)));
      },
      [self](shardrep_atom, const std::string& bytes) -> caf::result<std::string> {
        self->state.core->count_message("shardrep");
        auto reports = ledger::decode_shard_reports(bytes);
        if (!reports)
          return encode_error(reports.err().code, "shard reports: " + reports.err().message);
        auto& core = *self->state.core;
        messages::shard_reports_reply reply;
        for (const auto& ack : reports->acks) {
          auto st = core.shard_ack(ack);
          if (!st)
            logger("coordinator")
                ->warn("shard ack of unit {} attempt {}: {}", ack.unit, ack.attempt,
                       st.err().to_string());
          reply.errors.push_back(st ? std::string() : st.err().to_string());
        }
        for (const auto& c : reports->consumed) {
          auto st = core.consumed(c);
          if (!st)
            logger("coordinator")
                ->error("{} unit {} group {}: {}", ledger::handout_step_name(c.step), c.unit,
                        c.group, st.err().to_string());
          reply.errors.push_back(st ? std::string() : st.err().to_string());
        }
        return reply_durable(self, messages::encode(reply));
      },
      [self](claim_atom, const std::string& bytes) -> caf::result<std::string> {
        self->state.core->count_message("claim");
        auto c = messages::decode<messages::trainer_claim>(bytes);
        if (!c) return encode_error(c.err().code, "trainer claim: " + c.err().message);
        return reply_durable(self, reply_bytes(self->state.core->trainer_claim(*c)));
      },
      [self](stats_atom, const std::string& node, const std::string& text) {
        self->state.core->count_message("stats");
        auto j = nlohmann::json::parse(text, nullptr, false);
        if (!j.is_discarded()) self->state.core->node_stats(node, j);
      },
      [self](version_atom, uint64_t v, const std::string& manifest) {
        self->state.core->count_message("version");
        self->state.core->policy_version(v, manifest);
        schedule_flush(self);
      },
      [self](drained_atom, const std::string& node,
             const std::string& record) -> caf::result<std::string> {
        self->state.core->count_message("drained");
        auto j = nlohmann::json::parse(record, nullptr, false);
        if (j.is_discarded() || !j.is_object()) j = nlohmann::json::object();
        auto& s = self->state;
        if (auto it = s.agents.find(node); it != s.agents.end()) {
          self->demonitor(it->second);
          s.by_addr.erase(it->second.address());
          s.agents.erase(it);
        }
        s.core->drained(node, j);
        return reply_durable(self, "");
      },
      [self](gaveup_atom, const std::string& node, const std::string& cause) -> std::string {
        self->state.core->count_message("gaveup");
        self->state.core->gave_up(node, cause);
        return "";
      },
      [self](admin_atom, const std::string& bytes) -> std::string {
        self->state.core->count_message("admin");
        auto req = messages::decode<messages::admin_request>(bytes);
        messages::admin_reply rep;
        if (!req) {
          rep.ok = false;
          rep.err = moerl::error(req.err().code, "admin request: " + req.err().message);
        } else {
          rep = self->state.core->admin(*req);
        }
        schedule_flush(self);
        return messages::encode(rep);
      },
      // ---- groups across nodes (coordinator_groups.h) ----
      [self](gjoin_atom, const std::string& node, const std::string& group, const std::string& role,
             uint32_t size, uint32_t ranks_per_node, const std::string& shape,
             const std::string& hash, const std::string& version) -> std::string {
        self->state.core->count_message("gjoin");
        return group_join(*self->state.core, node, group, role, size, ranks_per_node, shape, hash,
                          version);
      },
      [self](gview_atom, const std::string& node) {
        self->state.core->count_message("gview");
        return group_view_reply(*self->state.core, node);
      },
      [self](ggather_atom, const std::string& node, uint64_t incarnation,
             const std::string& channel, const std::string& participants, int32_t rank,
             std::string& payload) {
        self->state.core->count_message("ggather");
        auto rp = self->make_response_promise();
        group_gather(*self->state.core, self->state.gathers, rp, node, incarnation, channel,
                     participants, rank, std::move(payload));
        return rp;
      },
      [self](gfailed_atom, const std::string& node, uint64_t incarnation,
             const std::string& cause) {
        self->state.core->count_message("gfailed");
        auto& core = *self->state.core;
        core.groups().member_failed(node, incarnation, cause, core.now_ms());
        answer_failed_gathers(core, self->state.gathers);
      },
      [self](grestored_atom, const std::string& node, uint64_t incarnation, uint64_t version) {
        self->state.core->count_message("grestored");
        self->state.core->groups().restored(node, incarnation, version);
      },
      [self](tick_atom) {
        self->state.core->count_message("tick");
        // Ticks come every 100 ms; one 1 s late means this actor did not run meanwhile.
        const auto now = std::chrono::steady_clock::now();
        const auto late = std::chrono::duration_cast<std::chrono::milliseconds>(
                              now - self->state.last_tick - std::chrono::milliseconds(100))
                              .count();
        self->state.last_tick = now;
        if (late > 1000) self->state.core->stalled(late);
        self->state.core->tick();
        answer_failed_gathers(*self->state.core, self->state.gathers);
        schedule_flush(self);
        self->delayed_send(self, std::chrono::milliseconds(100), tick_atom::value);
      },
      [self](shutdown_atom) {
        self->state.core->count_message("shutdown");
        logger("coordinator")->info("shutting down");
        self->quit();
      },
  };
}

}  // namespace

caf::actor spawn_coordinator(caf::actor_system& sys, std::unique_ptr<coordinator_core> core) {
  auto box = std::make_shared<std::unique_ptr<coordinator_core>>(std::move(core));
  return sys.spawn(coordinator_impl, box);
}

}  // namespace moerl::actors
