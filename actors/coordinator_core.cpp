#include "actors/coordinator_core.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>

#include "actors/internal/job_history.h"
#include "actors/interruption.h"
#include "common/config.h"
#include "common/log.h"

namespace moerl::actors {

using nlohmann::json;

std::string encode_error(errc code, const std::string& message) {
  return messages::encode(messages::wire_error{moerl::error(code, message)});
}

result<coordinator_options> coordinator_options::from_config(const config& cfg) {
  coordinator_options o;
  auto positive = [&](const char* key, int64_t max) -> result<uint32_t> {
    int64_t v = cfg.get_int(key);
    if (v < 1 || v > max)
      return error(errc::invalid_config, std::string(key) + " must be in 1.." +
                                             std::to_string(max) + ", got " + std::to_string(v));
    return static_cast<uint32_t>(v);
  };
  auto it = positive("actors.iterations", 1000000);
  if (!it) return it.err();
  auto upi = positive("actors.units_per_iteration", 1000000);
  if (!upi) return upi.err();
  auto gpu = positive("actors.groups_per_unit", cfg.get_int("ledger.max_groups_per_unit"));
  if (!gpu) return gpu.err();
  o.iterations = *it;
  o.units_per_iteration = *upi;
  o.groups_per_unit = *gpu;
  o.heartbeat_timeout_ms =
      cfg.get_int("node.heartbeat_interval_ms") * cfg.get_int("actors.heartbeat_misses");
  o.default_notice_ms = cfg.get_int("actors.sigterm_grace_ms");
  o.rebalance_grace_ms = cfg.get_int("imds.rebalance_grace_ms");
  o.group_form_timeout_ms = cfg.get_int("trainer.group_form_timeout_ms");
  o.console_token = cfg.get_string("console.token");
  auto lb = positive("actors.lease_batch", 4096);
  if (!lb) return lb.err();
  o.lease_batch = *lb;
  return o;
}

coordinator_core::coordinator_core(coordinator_options opts,
                                   std::unique_ptr<ledger::work_ledger> ledger,
                                   const ledger::clock& clock)
    : opts_(std::move(opts)),
      ledger_(std::move(ledger)),
      clock_(clock),
      groups_(opts_.group_form_timeout_ms) {
  started_ms_ = clock_.now_ms();
  // A recovered ledger already holds units: continue numbering groups after them and
  // count the iterations they cover as opened.
  size_t units = ledger_->num_units();
  iterations_opened_ =
      static_cast<uint32_t>((units + opts_.units_per_iteration - 1) / opts_.units_per_iteration);
  next_group_ = 1 + units * opts_.groups_per_unit;
  if (iterations_opened_ == 0) open_iteration();
}

// ---- membership -------------------------------------------------------------------------

status coordinator_core::register_node(const messages::heartbeat& hb) {
  if (hb.node.size() != 32 || hb.node.find_first_not_of("0123456789abcdef") != std::string::npos)
    return error(errc::invalid_argument, "node id '" + hb.node + "' is not 32 hex digits");
  auto role = parse_role(hb.role);
  if (!role || *role == node_role::coordinator)
    return error(errc::invalid_argument, "unknown role '" + hb.role + "'");
  if (auto dead = nodes_.find(hb.node); dead != nodes_.end() && dead->second.state == "dead") {
    // Its leases ended and its shard's groups were re-opened when it was declared dead: taking
    // it back would let it serve groups that are being generated again (LEDGER.md).
    logger("coordinator")
        ->warn("node {} ({}) refused: it was declared dead ({}); fenced", dead->second.name,
               hb.node.substr(0, 8), dead->second.down_reason);
    return error(errc::peer_dead, "node " + dead->second.name + " (" + hb.node.substr(0, 8) +
                                      ") was declared dead (" + dead->second.down_reason +
                                      "): fenced; exit and re-join as a new process");
  }
  const std::string name = hb.name.empty() ? hb.role + "-" + hb.node.substr(0, 6) : hb.name;
  if (*role == node_role::buffer) {
    // A new process under a shard's name: the shard's previous process is gone (a pod
    // controller replaced it), or must be, since both would hold the one name's groups. It is
    // declared down now, its groups re-opened, before the successor takes the name: left to
    // its re-join grace, its later shard_lost would re-open the successor's groups too and
    // forget the successor's shard, and no unit would be leased to it again.
    if (auto prev = shard_node_.find(name); prev != shard_node_.end() && prev->second != hb.node) {
      const std::string prev_id = prev->second;
      node_down(prev_id, "replaced by a new process under its name (" + hb.node.substr(0, 8) + ")",
                true);
    }
  }
  auto& n = nodes_[hb.node];
  bool rejoin = !n.id.empty();
  n.id = hb.node;
  n.name = name;
  n.role = *role;
  n.pid = hb.pid;
  n.endpoint = hb.endpoint;
  n.state = hb.state.empty() ? "running" : hb.state;
  n.restarts = hb.restarts;
  n.last_seen_ms = clock_.now_ms();
  if (n.role == node_role::buffer) {
    if (hb.endpoint.empty())
      return error(errc::invalid_argument,
                   "buffer node " + n.name + " registered without an endpoint");
    shard_node_[n.name] = n.id;
    if (auto u = undelivered_.find(n.name); u != undelivered_.end()) {
      for (auto& e : u->second) {
        outbound o;
        o.what = outbound::kind::shard_event;
        o.node = n.id;
        o.event = std::move(e);
        out_.push_back(std::move(o));
      }
      undelivered_.erase(u);
    }
    for (const auto& [consumer, bound] : lost_consumers_)
      out_.push_back(outbound{outbound::kind::consumer_lost, n.id, {}, bound, {}, 0, consumer});
    auto st = ledger_->add_shard(n.name);
    if (!st && st.err().code != errc::duplicate && !rejoin)
      logger("coordinator")->warn("add_shard({}): {}", n.name, st.err().to_string());
  }
  out_.push_back(outbound{outbound::kind::policy_version, n.id, {}, policy_version_, {}, 0});
  logger("coordinator")
      ->info("node {} joined: role={} pid={} id={}{}", n.name, to_string(n.role), n.pid,
             n.id.substr(0, 8), rejoin ? " (re-join)" : "");
  return ok_status();
}

status coordinator_core::heartbeat(const messages::heartbeat& hb) {
  auto it = nodes_.find(hb.node);
  if (it == nodes_.end())
    return error(errc::unknown_node, "heartbeat from unregistered node " + hb.node.substr(0, 8));
  auto& n = it->second;
  if (n.state == "dead") {
    logger("coordinator")
        ->warn("heartbeat from node {} refused: it was declared dead ({}); fenced", n.name,
               n.down_reason);
    return error(errc::peer_dead, "node " + n.name + " was declared dead (" + n.down_reason +
                                      "): fenced; exit and re-join as a new process");
  }
  // Unreachable: its link dropped and the re-join grace runs; only a re-join ends that (a
  // heartbeat does not extend the grace, and is not acknowledged as alive).
  if (n.state != "running" && n.state != "draining")
    return error(errc::unknown_node,
                 "heartbeat from node " + n.name + " in state " + n.state + ": re-join first");
  const int64_t now = clock_.now_ms();
  ++n.heartbeats;
  n.max_silence_ms = std::max(n.max_silence_ms, now - n.last_seen_ms);
  // The send time is the node's wall clock: meaningful on one host (moerl up, a pod's
  // neighbours); across hosts it carries the clocks' offset.
  if (hb.sent_unix_ms > 0)
    n.max_delay_ms =
        std::max(n.max_delay_ms, unix_now_ms() - static_cast<int64_t>(hb.sent_unix_ms));
  n.last_seen_ms = now;
  n.restarts = hb.restarts;
  if (n.state == "running" && hb.state == "draining") n.state = "draining";
  return ok_status();
}

std::string coordinator_core::owner_of_worker(const std::string& worker) const {
  return worker.substr(0, worker.find('/'));
}

void coordinator_core::node_down(const std::string& node, const std::string& reason, bool fence) {
  auto it = nodes_.find(node);
  if (it == nodes_.end() || it->second.state == "dead" || it->second.state == "drained") return;
  auto& n = it->second;
  // Its group's waits end either way (an orderly stop too: a member must not wait for it).
  for (const auto& other : groups_.member_lost(node, reason, clock_.now_ms(), shutdown_))
    logger("coordinator")
        ->warn("group member {} stops: its group lost {}",
               nodes_.count(other) ? nodes_.at(other).name : other, n.name);
  if (shutdown_) {  // an orderly end of the run, not a failure: nothing to re-open
    n.state = "stopped";
    return;
  }
  // Declared dead while its process may still run (silent, not disconnected): fence it, so a
  // shard that comes back cannot serve samples the ledger has already re-opened.
  if (fence) out_.push_back(outbound{outbound::kind::signal, node, {}, 0, {}, SIGKILL});
  n.state = "dead";
  n.down_reason = reason;
  n.leases = 0;
  auto log = logger("coordinator");
  log->warn("node {} ({}) is down: {}", n.name, to_string(n.role), reason);
  if (n.role == node_role::rollout) {
    // Workers are named "<node id>/<k>": expire every lease any of them holds.
    std::set<std::string> workers;
    for (size_t u = 1; u <= ledger_->num_units(); ++u) {
      auto v = ledger_->find(u);
      if (v && v->state == ledger::unit_state::leased && owner_of_worker(v->worker) == node)
        workers.insert(v->worker);
    }
    for (auto& w : workers) {
      auto ended = ledger_->worker_dead(w);
      log->info("expired {} lease(s) of dead worker {}", ended.size(), w);
    }
  } else if (n.role == node_role::buffer) {
    auto reopened = ledger_->shard_lost(n.name);
    if (reopened)
      log->warn("shard {} lost: re-opened {} unit(s)", n.name, reopened->size());
    else
      log->error("shard_lost({}): {}", n.name, reopened.err().to_string());
    if (auto own = shard_node_.find(n.name); own != shard_node_.end() && own->second == node) {
      shard_node_.erase(own);  // not a successor's (register_node declares this one down first)
      undelivered_.erase(n.name);
    }
  } else if (n.role == node_role::trainer) {
    consumer_lost(n);
  }
  flush_ledger();
}

void coordinator_core::consumer_lost(const node_record& trainer) {
  // A successor under the same name already runs: its first request, from a newer
  // incarnation, releases what this one held (and a bound of now could cover its own).
  for (const auto& [id, other] : nodes_)
    if (id != trainer.id && other.name == trainer.name && other.role == node_role::trainer &&
        (other.state == "running" || other.state == "draining"))
      return;
  // Every incarnation this process made is older than now; a successor's steps are made
  // after it registers, so after now (incarnations are wall-clock µs, trainer_role.cpp).
  const uint64_t bound = static_cast<uint64_t>(unix_now_ms()) * 1000;
  lost_consumers_[trainer.name] = bound;
  // The ledger fences its claims too, and re-opens the groups it claimed from shards that
  // are gone (a live shard gives its groups back itself, below).
  if (auto reopened = ledger_->consumer_lost(trainer.name, bound); !reopened)
    logger("coordinator")->error("consumer_lost({}): {}", trainer.name, reopened.err().to_string());
  else if (!reopened->empty())
    logger("coordinator")
        ->warn("trainer consumer {} lost: re-opened {} unit(s) it claimed from lost shards",
               trainer.name, reopened->size());
  size_t num_shards = 0;
  for (const auto& [shard, id] : shard_node_) {
    out_.push_back(outbound{outbound::kind::consumer_lost, id, {}, bound, {}, 0, trainer.name});
    ++num_shards;
  }
  logger("coordinator")
      ->warn("trainer consumer {} lost: its handed groups go back to their {} shard(s)",
             trainer.name, num_shards);
}

void coordinator_core::link_lost(const std::string& node, const std::string& reason) {
  auto it = nodes_.find(node);
  if (it == nodes_.end() || it->second.state == "dead" || it->second.state == "drained") return;
  if (shutdown_) return node_down(node, reason);
  auto& n = it->second;
  n.state = "unreachable";
  n.down_reason = reason;
  n.last_seen_ms = clock_.now_ms();  // the grace runs from here
  logger("coordinator")
      ->warn("node {} ({}) unreachable: {}; {} ms to re-join", n.name, to_string(n.role), reason,
             kRejoinGraceMs);
}

void coordinator_core::drained(const std::string& node, const json& record) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  json r = record;
  r["node"] = it->second.name;
  if (auto p = pending_notices_.find(node); p != pending_notices_.end()) {
    for (auto& [k, v] : p->second.items())
      if (!r.contains(k)) r[k] = v;
    pending_notices_.erase(p);
  }
  interruptions_.push_back(r);
  // A drained buffer shard takes its unconsumed samples with it: re-open their units.
  bool was_buffer = it->second.role == node_role::buffer;
  node_down(node, "drained after " + r.value("source", std::string("notice")));
  it->second.state = "drained";
  (void)was_buffer;
}

void coordinator_core::gave_up(const std::string& node, const std::string& cause) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  it->second.gave_up = cause;
  logger("coordinator")
      ->error("node {} ({}) gave up: {}", it->second.name, to_string(it->second.role), cause);
}

void coordinator_core::node_stats(const std::string& node, const json& stats) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  json merged = stats;
  merge_job_history(merged, std::move(it->second.stats));
  it->second.stats = std::move(merged);
}

// ---- work -------------------------------------------------------------------------------

std::optional<error> coordinator_core::refuse_lease(const std::string& worker, node_record** node) {
  auto it = nodes_.find(owner_of_worker(worker));
  if (it == nodes_.end() || it->second.state == "dead")
    return error(errc::unknown_node, "lease request from unregistered worker " + worker);
  if (it->second.state != "running")
    return error(errc::shutting_down, "node " + it->second.name + " is " + it->second.state);
  if (shutdown_) return error(errc::shutting_down, "the run is shutting down");
  *node = &it->second;
  return std::nullopt;
}

std::optional<messages::lease> coordinator_core::to_wire(const ledger::lease& l,
                                                         int64_t unix_minus_clock) {
  auto shard = shard_node_.find(l.shard);
  if (shard == shard_node_.end()) {
    // The ledger knows a shard that has not (re-)joined since a coordinator restart: no one
    // could deliver to it. Hand the unit straight back (accounted as returned).
    (void)ledger_->give_back(l.unit, l.attempt, l.worker);
    return std::nullopt;
  }
  messages::lease m;
  m.unit.id = l.unit;
  m.unit.group_ids = l.groups;
  m.unit.samples_per_group = l.group_size;
  m.unit.task = opts_.task;
  m.attempt = l.attempt;
  m.worker = l.worker;
  m.deadline_unix_ms = static_cast<uint64_t>(l.deadline_ms + unix_minus_clock);
  m.policy_version = policy_version_;
  m.shard = l.shard;
  m.shard_endpoint = nodes_[shard->second].endpoint;
  return m;
}

result<messages::lease> coordinator_core::lease(const messages::lease_request& req) {
  node_record* node = nullptr;
  if (auto why = refuse_lease(req.worker, &node)) return *why;
  auto l = ledger_->acquire(req.worker);
  if (!l && l.err().code == errc::not_found && maybe_open_iteration())
    l = ledger_->acquire(req.worker);
  if (!l) return l.err();
  auto m = to_wire(*l, unix_now_ms() - clock_.now_ms());
  flush_ledger();  // the lease is durable (and the shard told) before the worker hears of it
  if (!m) return error(errc::capacity_exceeded, "shard " + l->shard + " has not joined yet");
  ++node->leases;
  return std::move(*m);
}

result<messages::lease_batch> coordinator_core::lease_batch(const messages::lease_request& req) {
  node_record* node = nullptr;
  if (auto why = refuse_lease(req.worker, &node)) return *why;
  uint32_t k = std::max(1u, std::min(req.max_units, opts_.lease_batch));
  auto got = ledger_->acquire_batch(req.worker, k);
  if (!got && got.err().code == errc::not_found && maybe_open_iteration())
    got = ledger_->acquire_batch(req.worker, k);
  if (!got) return got.err();
  const int64_t offset = unix_now_ms() - clock_.now_ms();
  messages::lease_batch out;
  out.leases.reserve(got->size());
  std::string unjoined;
  for (const auto& l : *got) {
    if (auto m = to_wire(l, offset))
      out.leases.push_back(std::move(*m));
    else
      unjoined = l.shard;
  }
  flush_ledger();  // as lease(): durable before the worker hears of any of them
  if (out.leases.empty())
    return error(errc::capacity_exceeded, "shard " + unjoined + " has not joined yet");
  node->leases += static_cast<uint32_t>(out.leases.size());
  return out;
}

status coordinator_core::give_back(const messages::lease_give_back& back) {
  auto it = nodes_.find(owner_of_worker(back.worker));
  status first;
  for (const auto& l : back.leases) {
    auto st = ledger_->give_back(l.unit, l.attempt, back.worker);
    if (st) {
      if (it != nodes_.end() && it->second.leases > 0) --it->second.leases;
    } else if (first) {
      first = st;
    }
  }
  flush_ledger();
  return first;
}

status coordinator_core::report(const messages::unit_report& rep) {
  auto node = owner_of_worker(rep.worker);
  auto it = nodes_.find(node);
  if (it != nodes_.end() && it->second.leases > 0) --it->second.leases;
  status st;
  if (rep.status == messages::unit_status::finished) {
    auto r = ledger_->report(rep.unit_id, rep.attempt, rep.worker, rep.samples_produced);
    if (!r) st = r.err();
  } else {
    st = ledger_->give_back(rep.unit_id, rep.attempt, rep.worker);
  }
  flush_ledger();
  return st;
}

status coordinator_core::shard_ack(const ledger::shard_ack& ack) {
  auto r = ledger_->record_ack(ack);
  flush_ledger();
  if (!r) return r.err();
  return ok_status();
}

status coordinator_core::consumed(const ledger::consumption& c) {
  auto st = ledger_->record_handout(c);
  flush_ledger();
  return st;
}

result<messages::trainer_claim_reply> coordinator_core::trainer_claim(
    const messages::trainer_claim& c) {
  const ledger::consumer_ref by{c.consumer, c.incarnation};
  auto steps = [&](const std::vector<messages::handed_group>& groups) {
    std::vector<ledger::consumption> out;
    out.reserve(groups.size());
    for (const auto& g : groups)
      out.push_back({g.unit, g.attempt, g.group, ledger_->options().group_size, g.handout,
                     ledger::handout_step::handed});
    return out;
  };
  auto log = logger("coordinator");
  if (!c.confirmed.empty()) {
    auto n = ledger_->confirm_claimed(by, steps(c.confirmed));
    if (!n) log->error("trainer {} confirmations: {}", c.consumer, n.err().to_string());
  }
  auto granted = ledger_->claim(by, steps(c.claims));
  flush_ledger();
  if (!granted) return granted.err();
  const auto refused = std::count(granted->begin(), granted->end(), false);
  if (refused > 0)
    log->warn(
        "trainer {} incarnation {}: {} of {} claimed group(s) refused (re-opened after their "
        "shard was declared lost, or the incarnation is fenced): not trained",
        c.consumer, c.incarnation, refused, granted->size());
  return messages::trainer_claim_reply{std::move(*granted)};
}

void coordinator_core::policy_version(uint64_t v, const std::string& manifest_bytes) {
  if (v <= policy_version_) return;
  policy_version_ = v;
  last_manifest_ = manifest_bytes;
  for (auto& [id, n] : nodes_)
    if (n.state != "dead" && n.state != "drained")
      out_.push_back(outbound{outbound::kind::policy_version, id, {}, v, {}, 0});
  logger("coordinator")->info("policy version {} published", v);
  maybe_open_iteration();
}

// Keep one iteration of work ahead of the trainer: open the next iteration's units when the
// queue ran dry and the trainer has reached the previous one. If groups were dropped
// (staleness) the trainer may never reach the version boundary: nothing left to lease or
// train also opens the next iteration. Checked where the answer can change (a lease that
// found the queue empty, a new version) as well as on the tick, so a rollout never waits for
// the tick (up to 100 ms) between iterations.
//
// The version counts the trainer's steps, each a full iteration's groups, while the groups
// dropped for good (stale at commit, or stale when a lost trainer's hand-out came back; the
// other drops are generated again) leave their iterations short. So the trainer has reached
// as many iterations as its version plus the iterations' worth of groups dropped for good.
// On the version alone, a run with failures fell a few versions behind the iterations opened,
// and from then on each iteration opened only when the one before was trained: no generation
// overlapped training (staleness 0; 90-108 s instead of 66-68 s for the default
// 1000-iteration run with 7 nodes killed, 7 Dec).
bool coordinator_core::maybe_open_iteration() {
  const auto& acct = ledger_->counters();
  const bool idle = ledger_->num_leased() == 0 && acct.trained == acct.committed;
  const uint64_t samples_per_iteration =
      uint64_t(opts_.units_per_iteration) * opts_.groups_per_unit * ledger_->options().group_size;
  uint64_t dropped_for_good = 0;
  for (const char* reason :
       {ledger::drop_reason::stale_policy, ledger::drop_reason::trainer_lost_stale})
    if (auto it = acct.dropped.find(reason); it != acct.dropped.end())
      dropped_for_good += it->second;
  const uint64_t reached =
      policy_version_ + (samples_per_iteration ? dropped_for_good / samples_per_iteration : 0);
  if (ledger_->num_pending() != 0 || iterations_opened_ >= opts_.iterations ||
      !(reached + 1 >= iterations_opened_ || idle))
    return false;
  open_iteration();
  return true;
}

void coordinator_core::open_iteration() {
  if (iterations_opened_ >= opts_.iterations) return;
  for (uint32_t u = 0; u < opts_.units_per_iteration; ++u) {
    std::vector<ledger::group_id> groups;
    for (uint32_t g = 0; g < opts_.groups_per_unit; ++g) groups.push_back(next_group_++);
    auto id = ledger_->add_unit(groups);
    if (!id) logger("coordinator")->error("add_unit: {}", id.err().to_string());
  }
  ++iterations_opened_;
  flush_ledger();
}

void coordinator_core::save_group_history() {
  if (!group_history_sink_ || groups_.history_version() == group_history_saved_) return;
  if (auto st = group_history_sink_(groups_.history_json()); !st) {
    // Kept unsaved: the next tick tries again (only the report's history is at stake).
    logger("coordinator")->error("saving the groups' history: {}", st.err().to_string());
    return;
  }
  group_history_saved_ = groups_.history_version();
}

void coordinator_core::tick() {
  auto now = clock_.now_ms();
  for (const auto& line : groups_.tick(now)) logger("coordinator")->warn("{}", line);
  save_group_history();
  // After a restart the ledger still names the shards of the previous incarnation. One that
  // has not re-joined within the heartbeat timeout is gone: re-open what it held.
  if (!recovery_checked_ && ledger_->epoch() > 1 &&
      now - started_ms_ > 2 * opts_.heartbeat_timeout_ms) {
    recovery_checked_ = true;
    std::set<std::string> known;
    for (size_t u = 1; u <= ledger_->num_units(); ++u)
      if (auto v = ledger_->find(u); v && !v->shard.empty()) known.insert(v->shard);
    for (auto& shard : known)
      if (!shard_node_.count(shard)) {
        auto r = ledger_->shard_lost(shard);
        logger("coordinator")
            ->warn("shard {} did not re-join after the restart: {}", shard,
                   r ? "re-opened " + std::to_string(r->size()) + " unit(s)" : r.err().to_string());
        undelivered_.erase(shard);
      }
  }
  auto ended = ledger_->expire_due();
  if (!ended.empty()) logger("coordinator")->info("{} lease(s) expired", ended.size());
  for (auto& [id, n] : nodes_)
    if (n.state == "unreachable" && now - n.last_seen_ms > kRejoinGraceMs) {
      auto name = id;
      node_down(name,
                n.down_reason + "; no re-join within " + std::to_string(kRejoinGraceMs) + " ms");
    }
  for (auto& [id, n] : nodes_)
    if ((n.state == "running" || n.state == "draining") &&
        now - n.last_seen_ms > opts_.heartbeat_timeout_ms) {
      auto name = id;  // node_down mutates the map entry, not the map
      node_down(name, "no heartbeat for " + std::to_string(now - n.last_seen_ms) + " ms", true);
    }
  maybe_open_iteration();
  flush_ledger();
  record_invariant();
}

void coordinator_core::stalled(int64_t ms) {
  if (ms <= 0) return;
  logger("coordinator")
      ->warn("the coordinator did not run for {} ms: node silence in that time is not counted", ms);
  for (auto& [id, n] : nodes_)
    if (n.state == "running" || n.state == "draining" || n.state == "unreachable")
      n.last_seen_ms += ms;
}

void coordinator_core::flush_ledger() {
  if (group_commit_) {
    flush_due_ = true;  // the owner's flush() syncs once for the whole group
    return;
  }
  (void)sync_and_route();
}

bool coordinator_core::flush() {
  flush_due_ = false;
  if (sync_and_route()) return true;
  flush_due_ = true;
  return false;
}

result<ledger::work_ledger::sync_batch> coordinator_core::begin_flush() {
  flush_due_ = false;
  auto batch = ledger_->begin_sync();
  if (!batch) flush_due_ = true;
  return batch;
}

bool coordinator_core::end_flush(ledger::work_ledger::sync_batch batch, const status& written) {
  if (route_durable(ledger_->end_sync(std::move(batch), written))) return true;
  flush_due_ = true;
  return false;
}

bool coordinator_core::sync_and_route() { return route_durable(ledger_->sync()); }

bool coordinator_core::route_durable(const status& st) {
  if (!st) {
    // The tail stays in memory and the next sync retries; events wait for durability.
    logger("coordinator")->error("ledger sync failed (will retry): {}", st.err().to_string());
    return false;
  }
  for (auto& e : ledger_->take_events()) {
    auto it = shard_node_.find(e.shard);
    if (it == shard_node_.end()) {
      // Not registered (yet): after a coordinator restart the ledger re-sends commits before
      // the shards re-join. Kept until the shard registers; dropped if it is declared lost.
      undelivered_[e.shard].push_back(std::move(e));
      continue;
    }
    outbound o;
    o.what = outbound::kind::shard_event;
    o.node = it->second;
    o.event = std::move(e);
    out_.push_back(std::move(o));
  }
  return true;
}

void coordinator_core::record_invariant() {
  // check_invariant recomputes the books from every unit the run created: 8 ms at 10k units
  // and 120 ms at 100k here (`moerl bench ledger`, coordinator_tick), more than the tick
  // itself. Paced so that it takes at most ~10% of the coordinator's time: run again only
  // once ten times its last duration has passed. A small ledger is still checked every tick.
  const auto now = std::chrono::steady_clock::now();
  if (now - invariant_checked_at_ < 10 * invariant_check_cost_) return;
  auto st = ledger_->check_invariant();
  invariant_checked_at_ = std::chrono::steady_clock::now();
  invariant_check_cost_ = invariant_checked_at_ - now;
  invariant_ok_ = static_cast<bool>(st);
  if (!st) {
    ++invariant_violations_;
    if (last_violation_ != st.err().message)
      logger("coordinator")->error("accounting invariant broken: {}", st.err().message);
    last_violation_ = st.err().message;
  }
}

bool coordinator_core::done() const {
  const auto& a = ledger_->counters();
  return iterations_opened_ >= opts_.iterations && ledger_->num_pending() == 0 &&
         ledger_->num_leased() == 0 && a.trained == a.committed;
}

std::vector<outbound> coordinator_core::take_outbound() {
  std::vector<outbound> o;
  o.swap(out_);
  return o;
}

}  // namespace moerl::actors
