#include "bench/fleet/sim_node.h"

#include <unistd.h>

#include <chrono>
#include <deque>
#include <map>
#include <optional>

#include <caf/all.hpp>

#include "actors/atoms.h"
#include "actors/interruption.h"
#include "actors/node_identity.h"
#include "actors/rollout_work.h"
#include "ledger/sample_plane.h"
#include "messages/all.h"

namespace moerl::bench {
namespace {

using namespace moerl::actors;
using std::chrono::milliseconds;

// Local timers of one node (never leave the process).
using sim_lease_atom = caf::atom_constant<caf::atom("simlease")>;  // ask for leases now
using sim_hb_atom = caf::atom_constant<caf::atom("simhb")>;        // heartbeat due
using sim_done_atom = caf::atom_constant<caf::atom("simdone")>;    // unit's generation time over
using sim_pump_atom = caf::atom_constant<caf::atom("simpump")>;    // samples waiting for credit

struct sim_state {
  caf::actor coord;
  std::shared_ptr<actors::job> job;
  std::shared_ptr<zmq::zmq_context> zmq;
  std::shared_ptr<fleet_record> rec;
  sim_node_options opts;
  std::string id, worker;
  std::unique_ptr<rollout_work> work;
  std::unique_ptr<reward_function> reward;
  std::map<std::string, std::unique_ptr<ledger::sample_producer>> producers;  // by endpoint
  std::deque<messages::lease> queue;                                          // leased, not started
  std::optional<messages::lease> unit;                                        // in hand
  double unit_ends_ms = 0;                // when its generation time is over
  bool generating = false;                // the unit's timer runs (a notice may return it)
  std::deque<messages::sample> outgoing;  // the unit's samples waiting for credit
  uint64_t hb_seq = 0;
  bool draining = false;
  double notice_ms = 0;
  messages::interruption_notice notice;
  // Counted from the notice on, as a real node's drain record counts them.
  uint32_t units_finished = 0, units_returned = 0;
  bool drain_told = false;   // `drained` sent: the node is leaving
  bool giving_back = false;  // the drain's give-back waits for its answer
};
using sim_actor = caf::stateful_actor<sim_state>;

std::string heartbeat_bytes(sim_actor* self) {
  auto& st = self->state;
  messages::heartbeat hb;
  hb.node = st.id;
  hb.role = "rollout";
  hb.name = "sim-" + st.id.substr(0, 8);
  hb.pid = static_cast<uint32_t>(::getpid());
  hb.seq = ++st.hb_seq;
  hb.sent_unix_ms = static_cast<uint64_t>(unix_now_ms());
  hb.state = st.draining ? "draining" : "running";
  hb.leases = static_cast<uint32_t>(st.queue.size() + (st.unit ? 1 : 0));
  return messages::encode(hb);
}

// The reply's error (a moerl error encoded by the coordinator), or nullopt when it is none.
std::optional<error> reply_error(const std::string& raw) {
  if (raw.empty()) return std::nullopt;
  auto k = messages::peek_kind(raw.data(), raw.size());
  if (!k || *k != messages::kind::error) return std::nullopt;
  auto e = messages::decode<messages::wire_error>(raw);
  return e ? e->value : e.err();
}

void ask_for_leases(sim_actor* self);
void start_next_unit(sim_actor* self);
void complete_drain(sim_actor* self);

std::vector<fleet_lease_event> held(const sim_state& st, double t) {
  std::vector<fleet_lease_event> out;
  if (st.unit) out.push_back({t, st.unit->unit.id, st.unit->attempt});
  for (const auto& l : st.queue) out.push_back({t, l.unit.id, l.attempt});
  return out;
}

// The node is done with its unit (reported) or gave it back: next unit, next lease, or, when
// draining, the end of the drain.
void after_unit(sim_actor* self) {
  auto& st = self->state;
  st.unit.reset();
  st.generating = false;
  st.outgoing.clear();
  if (st.draining) return complete_drain(self);
  if (!st.queue.empty()) return start_next_unit(self);
  ask_for_leases(self);
}

void report(sim_actor* self, messages::unit_status status, uint32_t produced,
            const std::string& reason) {
  auto& st = self->state;
  messages::unit_report rep;
  rep.unit_id = st.unit->unit.id;
  rep.attempt = st.unit->attempt;
  rep.worker = st.worker;
  rep.status = status;
  rep.samples_produced = produced;
  rep.reason = reason;
  const double t_notice = st.notice_ms, t_sent = fleet_now_ms();
  self->request(st.coord, milliseconds(st.opts.request_timeout_ms), report_atom::value,
                messages::encode(rep))
      .then(
          [=](const std::string& r) {
            auto& s = self->state;
            if (auto e = reply_error(r)) {
              s.rec->unit_failed(std::string("report refused: ") + errc_name(e->code));
            } else if (status == messages::unit_status::finished) {
              s.rec->unit_finished(t_sent, fleet_now_ms());
              if (s.draining) ++s.units_finished;
            } else if (status == messages::unit_status::returned) {
              s.rec->returned(t_notice, fleet_now_ms(), rep.unit_id, rep.attempt);
              ++s.units_returned;
            }
            after_unit(self);
          },
          [=](caf::error& e) {
            self->state.rec->unit_failed("report: " + self->system().render(e));
            after_unit(self);
          });
}

// The node's producer towards a shard (one per shard it was leased units of), connected on
// first use; null with `why` set when it cannot connect.
ledger::sample_producer* producer_for(sim_state& st, const std::string& endpoint,
                                      std::string& why) {
  auto& p = st.producers[endpoint];
  if (!p) {
    auto c = ledger::sample_producer::connect(st.zmq, endpoint, st.worker);
    if (!c) {
      why = c.err().to_string();
      return nullptr;
    }
    p = std::move(*c);
  }
  return p.get();
}

// Sends the unit's samples as the shard grants credit, then reports the unit.
void pump(sim_actor* self) {
  auto& st = self->state;
  if (!st.unit) return;
  const uint32_t n =
      static_cast<uint32_t>(st.unit->unit.group_ids.size()) * st.unit->unit.samples_per_group;
  std::string why;
  auto* p = producer_for(st, st.unit->shard_endpoint, why);
  if (!p) return report(self, messages::unit_status::failed, 0, why);
  if (auto s = p->poll(0); !s)
    return report(self, messages::unit_status::failed, 0, s.err().message);
  while (!st.outgoing.empty()) {
    auto s = p->try_send(st.outgoing.front());
    if (!s && s.err().code == errc::capacity_exceeded) {
      self->delayed_send(self, milliseconds(2), sim_pump_atom::value);
      return;
    }
    if (!s) return report(self, messages::unit_status::failed, 0, s.err().to_string());
    st.outgoing.pop_front();
    st.rec->samples_sent(1);
  }
  report(self, messages::unit_status::finished, n, "");
}

// The unit's generation time is over: its samples, made by the job's real work and scored.
void generate(sim_actor* self) {
  auto& st = self->state;
  st.generating = false;
  const auto& l = *st.unit;
  uint32_t seq = 0;
  for (uint32_t gi = 0; gi < l.unit.group_ids.size(); ++gi) {
    auto prompt = st.job->prompt(l.unit.group_ids[gi]);
    if (!prompt) return report(self, messages::unit_status::failed, 0, prompt.err().to_string());
    for (uint32_t i = 0; i < l.unit.samples_per_group; ++i) {
      auto gs = st.work->generate(*prompt, gi, i, l.policy_version);
      if (!gs) return report(self, messages::unit_status::failed, 0, gs.err().to_string());
      auto score = st.reward->score(gs->prompt, gs->tokens);
      if (!score) return report(self, messages::unit_status::failed, 0, score.err().to_string());
      messages::sample s;
      s.work_unit = l.unit.id;
      s.attempt = l.attempt;
      s.seq = seq++;
      s.policy_version = l.policy_version;
      s.group_id = l.unit.group_ids[gi];
      s.index_in_group = i;
      s.prompt_tokens = std::move(gs->prompt);
      s.tokens = std::move(gs->tokens);
      s.logprobs = std::move(gs->logprobs);
      s.worker = st.worker;
      s.generate_us = static_cast<uint32_t>(st.opts.unit_ms * 1000 / l.unit.samples_per_group);
      s.reward = *score;
      s.rewarded = true;
      st.outgoing.push_back(std::move(s));
    }
  }
  // Credit for the whole unit in one round trip (pump reports a producer that cannot connect).
  std::string why;
  if (auto* p = producer_for(st, l.shard_endpoint, why)) (void)p->declare_backlog(seq);
  pump(self);
}

void start_next_unit(sim_actor* self) {
  auto& st = self->state;
  while (!st.queue.empty()) {
    st.unit = std::move(st.queue.front());
    st.queue.pop_front();
    // Expired while queued: the ledger re-opens it and fences the attempt (rollout_role.cpp).
    if (static_cast<uint64_t>(unix_now_ms()) < st.unit->deadline_unix_ms) break;
    st.unit.reset();
  }
  if (!st.unit) return ask_for_leases(self);
  st.generating = true;
  st.unit_ends_ms = fleet_now_ms() + double(st.opts.unit_ms);
  self->delayed_send(self, milliseconds(st.opts.unit_ms), sim_done_atom::value, st.unit->unit.id,
                     st.unit->attempt);
}

void ask_for_leases(sim_actor* self) {
  auto& st = self->state;
  if (st.draining) return complete_drain(self);
  messages::lease_request req;
  req.worker = st.worker;
  req.max_units = st.opts.lease_batch;
  const double t0 = fleet_now_ms();
  auto msg = st.opts.lease_batch == 1
                 ? caf::make_message(lease_atom::value, messages::encode(req))
                 : caf::make_message(leases_atom::value, messages::encode(req));
  self->request(st.coord, milliseconds(st.opts.request_timeout_ms), std::move(msg))
      .then(
          [=](const std::string& r) {
            auto& s = self->state;
            const double t1 = fleet_now_ms();
            if (auto e = reply_error(r)) {
              s.rec->lease_refused(errc_name(e->code));
              // As a rollout worker: poll again soon when nothing is pending, later otherwise.
              const int64_t wait = e->code == errc::not_found ? 20 : 200;
              self->delayed_send(self, milliseconds(wait), sim_lease_atom::value);
              return;
            }
            std::vector<messages::lease> got;
            if (s.opts.lease_batch == 1) {
              auto l = messages::decode<messages::lease>(r);
              if (l) got.push_back(std::move(*l));
            } else if (auto b = messages::decode<messages::lease_batch>(r)) {
              got = std::move(b->leases);
            }
            if (got.empty()) {
              s.rec->lease_refused("undecodable");
              self->delayed_send(self, milliseconds(200), sim_lease_atom::value);
              return;
            }
            std::vector<fleet_lease_event> ev;
            for (const auto& l : got) ev.push_back({t1, l.unit.id, l.attempt});
            s.rec->lease_granted(t0, t1, ev);
            for (auto& l : got) s.queue.push_back(std::move(l));
            if (s.draining) return complete_drain(self);  // gives the batch back
            start_next_unit(self);
          },
          [=](caf::error& e) {
            self->state.rec->lease_refused(self->system().render(e));
            self->delayed_send(self, milliseconds(200), sim_lease_atom::value);
          });
}

// A notice: stop leasing; the unit in hand is finished only if its generation ends before
// the deadline minus the margin (rollout_role.cpp judges by its measured cost the same way).
void on_notice(sim_actor* self, const messages::interruption_notice& n) {
  auto& st = self->state;
  if (st.draining) return;
  st.draining = true;
  st.notice = n;
  st.notice_ms = fleet_now_ms();
  const double until_deadline_ms =
      double(int64_t(n.deadline_unix_ms) - unix_now_ms() - st.opts.drain_margin_ms);
  if (st.unit && st.generating && st.unit_ends_ms - st.notice_ms > until_deadline_ms) {
    st.generating = false;  // its timer's message is ignored from now on
    return report(self, messages::unit_status::returned, 0,
                  "drain: does not fit before the deadline");
  }
  if (!st.unit) complete_drain(self);  // idle (a lease request in flight ends it later)
}

// Gives back the leases not started, tells the coordinator the drain is over, leaves.
void complete_drain(sim_actor* self) {
  auto& st = self->state;
  if (st.unit || st.drain_told || st.giving_back)
    return;  // the unit in hand ends first; one `drained` only
  if (!st.queue.empty()) {
    messages::lease_give_back back;
    back.worker = st.worker;
    for (const auto& l : st.queue) back.leases.push_back({l.unit.id, l.attempt});
    auto given = st.queue;
    st.queue.clear();
    const double t_notice = st.notice_ms;
    st.giving_back = true;
    self->request(st.coord, milliseconds(st.opts.request_timeout_ms), giveback_atom::value,
                  messages::encode(back))
        .then(
            [=](const std::string&) {
              self->state.giving_back = false;
              for (const auto& l : given)
                self->state.rec->returned(t_notice, fleet_now_ms(), l.unit.id, l.attempt);
              self->state.units_returned += static_cast<uint32_t>(given.size());
              complete_drain(self);
            },
            [=](caf::error&) {
              self->state.giving_back = false;
              complete_drain(self);
            });
    return;
  }
  st.drain_told = true;
  nlohmann::json rec{{"source", messages::interruption_source_name(st.notice.source)},
                     {"at", st.notice.issued_unix_ms},
                     {"deadline", st.notice.deadline_unix_ms},
                     {"reason", st.notice.reason},
                     {"units_returned", st.units_returned},
                     {"units_finished", st.units_finished},
                     {"drain_ms", fleet_now_ms() - st.notice_ms}};
  self->request(st.coord, milliseconds(st.opts.request_timeout_ms), drained_atom::value, st.id,
                rec.dump())
      .then(
          [=](const std::string&) mutable {
            rec["notice_ms"] = self->state.notice_ms;
            rec["recorded_ms"] = fleet_now_ms();
            self->state.rec->drained(rec);
            self->quit();
          },
          [=](caf::error&) mutable {
            rec["drained_unanswered"] = true;
            self->state.rec->drained(rec);
            self->quit();
          });
}

caf::behavior sim_node(sim_actor* self, caf::actor coord, std::shared_ptr<actors::job> job,
                       std::shared_ptr<zmq::zmq_context> zmq, std::shared_ptr<fleet_record> rec,
                       sim_node_options opts) {
  auto& st = self->state;
  st.coord = std::move(coord);
  st.job = std::move(job);
  st.zmq = std::move(zmq);
  st.rec = std::move(rec);
  st.opts = opts;
  st.id = make_node_id();
  st.worker = st.id + "/0";
  auto w = st.job->make_rollout_work();
  auto r = st.job->make_reward();
  if (!w || !r) {
    st.rec->registered(false);
    self->quit(caf::make_error(caf::sec::runtime_error, "the job made no rollout work"));
    return {};
  }
  st.work = std::move(*w);
  st.reward = std::move(*r);
  // Messages from the coordinator it has no use for (policy versions, ...) are swallowed.
  // Not caf::drop: its unexpected_message error would travel back to the coordinator, which
  // ends it (bench/control/control_bench.cpp's stand-in shard learned that).
  self->set_default_handler(
      [](caf::scheduled_actor*, caf::message_view&) -> caf::result<caf::message> {
        return caf::message{};
      });
  self->request(st.coord, milliseconds(st.opts.request_timeout_ms), register_atom::value,
                heartbeat_bytes(self), caf::actor{self})
      .then(
          [=](const std::string& r) {
            const bool ok = !reply_error(r);
            self->state.rec->registered(ok);
            if (!ok) return self->quit();
            self->delayed_send(self, milliseconds(self->state.opts.heartbeat_ms),
                               sim_hb_atom::value);
            self->delayed_send(self, milliseconds(self->state.opts.start_delay_ms),
                               sim_lease_atom::value);
          },
          [=](caf::error&) {
            self->state.rec->registered(false);
            self->quit();
          });
  return {
      [=](sim_hb_atom) {
        auto& s = self->state;
        self->request(s.coord, milliseconds(s.opts.request_timeout_ms), heartbeat_atom::value,
                      heartbeat_bytes(self))
            .then(
                [=](const std::string& r) {
                  auto e = reply_error(r);
                  self->state.rec->heartbeat(!e);
                  // Declared dead and fenced: a real node exits (code 5); so does this one.
                  if (e && e->code == errc::peer_dead) self->quit(caf::exit_reason::kill);
                },
                [=](caf::error&) { self->state.rec->heartbeat(false); });
        self->delayed_send(self, milliseconds(s.opts.heartbeat_ms), sim_hb_atom::value);
      },
      [=](sim_lease_atom) {
        if (!self->state.unit && self->state.queue.empty()) ask_for_leases(self);
      },
      [=](sim_done_atom, uint64_t unit, uint32_t attempt) {
        auto& s = self->state;
        if (!s.generating || !s.unit || s.unit->unit.id != unit || s.unit->attempt != attempt)
          return;  // given back under a notice meanwhile
        generate(self);
      },
      [=](sim_pump_atom) { pump(self); },
      [=](notice_atom, const std::string& bytes) {
        if (auto n = messages::decode<messages::interruption_notice>(bytes)) on_notice(self, *n);
      },
      [=](sim_kill_atom) {
        self->state.rec->orphaned(held(self->state, fleet_now_ms()));
        self->quit(caf::exit_reason::kill);
      },
      [=](kill_atom, int32_t) {  // the coordinator fences this node (it declared it dead)
        self->state.rec->orphaned(held(self->state, fleet_now_ms()));
        self->quit(caf::exit_reason::kill);
      },
      [=](shutdown_atom) { self->quit(); },
  };
}

}  // namespace

caf::actor spawn_sim_node(caf::actor_system& sys, const caf::actor& coordinator,
                          std::shared_ptr<actors::job> job, std::shared_ptr<zmq::zmq_context> zmq,
                          std::shared_ptr<fleet_record> rec, sim_node_options opts) {
  return sys.spawn(sim_node, coordinator, std::move(job), std::move(zmq), std::move(rec), opts);
}

}  // namespace moerl::bench
