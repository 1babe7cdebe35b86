#include "sims/runner.h"

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <thread>

#include "up/pod_policy.h"

namespace moerl::sims::detail {

namespace {

bool is_down_state(const std::string& s) {
  return s == "draining" || s == "drained" || s == "dead" || s == "unreachable";
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s);
  return buf;
}

void add_note(fault_record& r, const std::string& text) {
  r.note += (r.note.empty() ? "" : "; ") + text;
}

}  // namespace

const node_view* observation::find(const std::string& name) const {
  const node_view* best = nullptr;
  for (const auto& n : nodes) {
    if (n.name != name) continue;
    // A name can appear twice after a re-join: the live entry is the one that counts.
    if (!best || (is_down_state(best->state) && !is_down_state(n.state))) best = &n;
  }
  return best;
}

runner::runner(std::vector<fault_event> timeline, job_console& console, job_hooks hooks,
               fault_delivery& delivery, int poll_ms)
    : console_(console), hooks_(std::move(hooks)), delivery_(delivery), poll_ms_(poll_ms) {
  for (auto& e : timeline) {
    fault_state f;
    f.rec.planned = e;
    f.rec.node = e.node;
    faults_.push_back(std::move(f));
  }
}

double runner::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

std::string runner::current_name(const std::string& planned) const {
  const auto it = alias_.find(planned);
  return it == alias_.end() ? planned : it->second;
}

void runner::observe() {
  observation o;
  o.t = now();
  if (auto st = console_.call("status")) {
    o.console_ok = true;
    o.status = *st;
    const auto acc = st->value("accounting", nlohmann::json::object());
    o.committed = acc.value("committed", uint64_t{0});
    o.iteration = st->value("iteration", uint64_t{0});
    o.leases = st->value("leases", uint64_t{0});
    auto nodes = console_.call("nodes");
    auto parsed = nodes ? parse_nodes(*nodes) : result<std::vector<node_view>>(nodes.err());
    // Between the two calls the coordinator may have died: keep the last good node list.
    o.nodes = parsed ? *parsed : last_.nodes;
    if (parsed) stall_.observe(o.t, o.nodes);
  } else {
    o.nodes = last_.nodes;
    o.committed = last_.committed;
    o.iteration = last_.iteration;
  }
  if (o.console_ok) {
    if (!iteration_seen_) {
      iteration_seen_ = true;
      last_iteration_ = o.iteration;
      last_iteration_change_ = o.t;
    } else if (o.iteration > last_iteration_) {
      // Several iterations may end between two polls: each gets an equal share.
      const double each = (o.t - last_iteration_change_) / double(o.iteration - last_iteration_);
      for (uint64_t i = last_iteration_; i < o.iteration; ++i) iteration_s_.push_back(each);
      last_iteration_ = o.iteration;
      last_iteration_change_ = o.t;
    } else if (o.iteration < last_iteration_) {
      // A restarted coordinator may report an older version until the trainer re-announces.
      last_iteration_ = o.iteration;
      last_iteration_change_ = o.t;
    }
  }
  last_ = std::move(o);
}

bool runner::replacement_pending(const std::string& planned) const {
  for (const auto& g : faults_) {
    const fault_event& e = g.rec.planned;
    if (e.node != planned || !removes_node(e.kind) || !e.replace || g.rec.injected_at < 0) continue;
    const bool not_gone_yet = g.gone_at < 0 && g.step == fault_state::phase::active;
    const bool starting =
        g.replacement_starting || (!g.rec.replacement.empty() && g.replacement_up_at < 0);
    if (not_gone_yet || g.replace_at >= 0 || starting) return true;
  }
  return false;
}

void runner::run(double duration_s, double settle_s) {
  duration_s_ = duration_s;
  t0_ = std::chrono::steady_clock::now();
  observe();
  first_t_ = last_.t;
  for (const auto& n : last_.nodes) {
    if (n.role == "trainer") trainer_restarts_at_start_[n.name] = n.restarts;
  }
  for (;;) {
    const auto tick = std::chrono::steady_clock::now();
    observe();
    bool all_settled = true;
    for (auto& f : faults_) {
      step(f);
      all_settled = all_settled && f.step == fault_state::phase::settled;
    }
    const double t = now();
    if (t >= duration_s && all_settled) break;
    if (t >= duration_s + settle_s) break;
    std::this_thread::sleep_until(tick + std::chrono::milliseconds(poll_ms_));
  }
}

void runner::undo_faults() {
  for (auto& f : faults_) {
    if (f.stopped) (void)delivery_.deliver(target_of(f), blow::cont, 0);
    f.stopped = false;
    if (f.rec.planned.kind == fault_kind::partition && hooks_.link_of) {
      if (netns_link* l = hooks_.link_of(f.rec.node); l && l->is_cut()) (void)l->heal();
    }
  }
}

std::vector<fault_record> runner::records() const {
  std::vector<fault_record> out;
  for (const auto& f : faults_) {
    out.push_back(f.rec);
    // The trainer's waiting from the injection to the recovery (to the end of the run if it
    // never recovered).
    if (f.rec.injected_at >= 0 && stall_.reported()) {
      out.back().trainer_stall_s =
          stall_.between(f.rec.injected_at, f.rec.recovered_at >= 0 ? f.rec.recovered_at : last_.t);
    }
  }
  return out;
}

int64_t runner::trainer_restarts() const {
  int64_t total = 0;
  for (const auto& n : last_.nodes) {
    if (n.role != "trainer") continue;
    const auto it = trainer_restarts_at_start_.find(n.name);
    total += int64_t(n.restarts) - int64_t(it == trainer_restarts_at_start_.end() ? 0 : it->second);
  }
  return total;
}

int64_t runner::ungrouped_trainer_restarts() const {
  int64_t total = 0;
  for (const auto& n : last_.nodes) {
    if (n.role != "trainer" || !n.group.empty()) continue;
    const auto it = trainer_restarts_at_start_.find(n.name);
    total += int64_t(n.restarts) - int64_t(it == trainer_restarts_at_start_.end() ? 0 : it->second);
  }
  return total;
}

std::vector<std::string> runner::collateral_losses() const {
  std::set<std::string> targeted;
  for (const auto& f : faults_) {
    if (f.rec.injected_at < 0) continue;
    targeted.insert(f.rec.node);
    if (!f.rec.replacement.empty()) targeted.insert(f.rec.replacement);
  }
  std::vector<std::string> out;
  for (const auto& n : last_.nodes) {
    if (!is_down_state(n.state) || targeted.count(n.name)) continue;
    // A node that left and came back (a re-join) is listed twice; the live entry wins.
    const node_view* live = last_.find(n.name);
    if (live && !is_down_state(live->state)) continue;
    const std::string entry = n.name + " (" + n.state + ")";
    if (std::find(out.begin(), out.end(), entry) == out.end()) out.push_back(entry);
  }
  return out;
}

void runner::step(fault_state& f) {
  const fault_event& ev = f.rec.planned;
  auto skip = [&](const std::string& why) {
    f.rec.skipped = why;
    f.step = fault_state::phase::settled;
  };
  switch (f.step) {
    case fault_state::phase::pending: {
      if (now() < ev.at_s) return;
      f.rec.node = current_name(ev.node);
      if (ev.kind == fault_kind::coordinator_restart) {
        if (!hooks_.coordinator_restartable) {
          return skip("the coordinator cannot be restarted from here (attach mode)");
        }
        return inject(f, nullptr);
      }
      if (ev.kind == fault_kind::partition) {
        const std::string why = hooks_.why_not_partitionable(f.rec.node);
        if (!why.empty()) return skip(why);
      }
      const node_view* n = last_.find(f.rec.node);
      if ((!n || n->state != "running") && replacement_pending(ev.node) && now() < duration_s_) {
        return;  // an earlier fault took the node; this one waits for its replacement
      }
      if (!n) return skip("node " + f.rec.node + " is not in the cluster (gone, not yet replaced)");
      if (n->state != "running") return skip("node " + f.rec.node + " is already " + n->state);
      if (ev.kind != fault_kind::spot_notice && ev.kind != fault_kind::rebalance_then_notice &&
          ev.kind != fault_kind::partition) {
        const std::string why = delivery_.why_not_reachable(*n);
        if (!why.empty()) return skip(why);
      }
      if (ev.kind == fault_kind::hard_kill && ev.phase != kill_phase::any) {
        f.step = fault_state::phase::arming;
        f.iteration_at_arm = last_.iteration;
        return;
      }
      return inject(f, n);
    }
    case fault_state::phase::arming: {
      const node_view* n = last_.find(f.rec.node);
      if (!n || n->state != "running")
        return skip("node " + f.rec.node + " went away before the phase came");
      const bool in_phase = ev.phase == kill_phase::generation
                                ? last_.leases > 0
                                : last_.iteration > f.iteration_at_arm;
      // Bounded wait: a job that never shows the phase still gets its fault, with a note.
      constexpr double kMaxArm_s = 30.0;
      if (in_phase) return inject(f, n);
      if (now() - ev.at_s > kMaxArm_s) {
        add_note(f.rec,
                 std::string("phase ") + kill_phase_name(ev.phase) + " not observed within 30 s");
        return inject(f, n);
      }
      return;
    }
    case fault_state::phase::active: return track(f);
    case fault_state::phase::settled: return;
  }
}

void runner::inject(fault_state& f, const node_view* n) {
  const fault_event& ev = f.rec.planned;
  const double t = now();
  f.pid = n ? n->pid : 0;
  f.rec.group = n ? n->group : "";
  f.committed_ref = last_.committed;
  f.iteration_ref = last_.iteration;
  auto fail = [&](const std::string& why) {
    f.rec.skipped = why;
    f.step = fault_state::phase::settled;
  };
  auto strike = [&](blow b) -> bool {
    auto st = delivery_.deliver(target_of(f), b, ev.grace_s);
    if (!st) {
      if (st.err().code == errc::not_found) {
        add_note(f.rec, "process was already gone");
        return true;
      }
      fail("the blow failed: " + st.err().message);
      return false;
    }
    return true;
  };
  switch (ev.kind) {
    case fault_kind::spot_notice: {
      auto r = console_.call("inject", {"spot", f.rec.node},
                             {{"deadline", seconds_text(ev.deadline_s)}});
      if (!r) return fail("console refused the spot notice: " + r.err().to_string());
      // At the deadline Spot reclaims the instance, drained or not.
      f.deadline_kill_at = t + ev.deadline_s + 1.0;
      break;
    }
    case fault_kind::rebalance_then_notice: {
      // No --deadline: a recommendation carries none; the job applies imds.rebalance_grace_ms
      // exactly as for one read from IMDS.
      auto r = console_.call("inject", {"rebalance", f.rec.node});
      if (!r) return fail("console refused the rebalance recommendation: " + r.err().to_string());
      f.notice_at = t + ev.notice_after_s;
      break;
    }
    case fault_kind::hard_kill:
    case fault_kind::reward_crash:
    case fault_kind::shard_loss:
    case fault_kind::env_kill:
    case fault_kind::weights_loss:
      if (!strike(blow::kill)) return;
      break;
    case fault_kind::sigterm:
      if (!strike(blow::terminate)) return;
      // Where the platform enforces the grace itself (a pod's kubelet), the runner does not.
      if (!delivery_.enforces_grace()) f.deadline_kill_at = t + ev.grace_s;
      break;
    case fault_kind::partition: {
      netns_link* l = hooks_.link_of(f.rec.node);
      auto st = l ? l->cut() : status(error{errc::internal, "no link for " + f.rec.node});
      if (!st) return fail("cutting the link failed: " + st.err().message);
      f.end_at = t + ev.duration_s;
      break;
    }
    case fault_kind::slow_node:
    case fault_kind::env_slow:
      if (!strike(blow::stop)) return;
      f.stopped = true;
      f.next_toggle = t + ev.stop_ms / 1000.0;
      f.end_at = t + ev.duration_s;
      break;
    case fault_kind::coordinator_restart: {
      auto st = hooks_.kill_coordinator();
      if (!st) return fail("killing the coordinator failed: " + st.err().message);
      f.end_at = t + ev.down_s;
      f.ref_set = true;  // recovery: committed beyond what it was before the kill
      break;
    }
  }
  f.rec.injected_at = t;
  f.step = fault_state::phase::active;
}

node_ref runner::target_of(const fault_state& f) const {
  return {f.rec.node, f.rec.planned.role, f.pid};
}

bool runner::node_gone(const fault_state& f, const node_view* n) {
  if (const auto g = delivery_.gone(target_of(f))) return *g;
  return n && (n->state == "dead" || n->state == "drained");
}

void runner::start_replacement(fault_state& f) {
  const fault_event& ev = f.rec.planned;
  // As the pod controllers do, and `moerl up` (up/pod_policy.h): a StatefulSet role's pod
  // is recreated under its own name, a Deployment's replaced by a new one with a new name.
  const bool recreate = up::controller_of(ev.role) == up::pod_controller::stateful_set;
  const std::string name =
      recreate ? ev.node : ev.node + "-r" + std::to_string(++replacements_made_[ev.node]);
  f.replace_at = -1;
  if (auto st = delivery_.start_replacement(target_of(f), name); !st) {
    add_note(f.rec, "replacement failed to start: " + st.err().message);
    return;
  }
  f.replacement_starting = true;
  await_replacement(f);
}

void runner::await_replacement(fault_state& f) {
  auto name = delivery_.replacement(f.rec.node);
  if (name && name->empty()) return;  // still starting
  f.replacement_starting = false;
  if (!name) {
    add_note(f.rec, "replacement failed: " + name.err().message);
    return;
  }
  alias_[f.rec.planned.node] = *name;
  f.rec.replacement = *name;
}

void runner::track(fault_state& f) {
  const fault_event& ev = f.rec.planned;
  const double t = now();
  const node_view* n = last_.find(f.rec.node);

  // ---- timed actions --------------------------------------------------------------------
  if (f.notice_at >= 0 && t >= f.notice_at) {
    f.notice_at = -1;
    // After a recommendation the node may have drained and left already (it finished what it
    // held well within the grace): then there is nobody to notify, as on EC2.
    if (n && (n->state == "drained" || n->state == "dead")) {
      add_note(f.rec, "the Spot notice found the node already " + n->state +
                          " (it drained on the rebalance recommendation)");
    } else if (auto r = console_.call("inject", {"spot", f.rec.node},
                                      {{"deadline", seconds_text(ev.deadline_s)}})) {
      f.deadline_kill_at = t + ev.deadline_s + 1.0;
    } else {
      add_note(f.rec, "console refused the spot notice: " + r.err().message);
    }
  }
  if (f.deadline_kill_at >= 0 && t >= f.deadline_kill_at) {
    f.deadline_kill_at = -1;
    if (!node_gone(f, n) && delivery_.deliver(target_of(f), blow::kill, 0).ok()) {
      add_note(f.rec,
               ev.kind == fault_kind::sigterm
                   ? "still alive after the grace period: SIGKILLed, as the kubelet does"
                   : "still alive at the deadline: SIGKILLed, as Spot reclaims the instance");
    }
  }
  if (is_duty_cycle(ev.kind) && !f.ended) {
    if (t >= f.end_at) {
      if (f.stopped) (void)delivery_.deliver(target_of(f), blow::cont, 0);
      f.stopped = false;
      f.ended = true;
      f.committed_ref = last_.committed;
      f.iteration_ref = last_.iteration;
      f.ref_set = true;
    } else if (t >= f.next_toggle) {
      f.stopped = !f.stopped;
      (void)delivery_.deliver(target_of(f), f.stopped ? blow::stop : blow::cont, 0);
      f.next_toggle = t + (f.stopped ? ev.stop_ms : ev.period_ms - ev.stop_ms) / 1000.0;
    }
  }
  if (ev.kind == fault_kind::partition && !f.ended && t >= f.end_at) {
    f.ended = true;
    if (netns_link* l = hooks_.link_of(f.rec.node)) {
      if (auto st = l->heal(); !st) add_note(f.rec, "healing the link failed: " + st.err().message);
    }
    if (f.rec.detected_at < 0) {
      // Never noticed: recovery is judged from the heal.
      f.committed_ref = last_.committed;
      f.iteration_ref = last_.iteration;
      f.ref_set = true;
    }
  }
  if (ev.kind == fault_kind::coordinator_restart && !f.ended && t >= f.end_at) {
    f.ended = true;
    if (auto st = hooks_.restart_coordinator(); !st) {
      add_note(f.rec, "restarting the coordinator failed: " + st.err().message);
    }
  }

  // ---- detection ------------------------------------------------------------------------
  if (f.rec.detected_at < 0) {
    const bool seen = ev.kind == fault_kind::coordinator_restart ? !last_.console_ok
                                                                 : (!n || is_down_state(n->state));
    if (seen && (ev.kind == fault_kind::coordinator_restart || last_.console_ok)) {
      f.rec.detected_at = last_.t;
      if (!f.ref_set && !is_duty_cycle(ev.kind)) {
        f.committed_ref = last_.committed;
        f.iteration_ref = last_.iteration;
        f.ref_set = true;
      }
    }
  }

  // ---- the node's process is gone: schedule its replacement -------------------------------
  if (removes_node(ev.kind) && f.gone_at < 0) {
    if (node_gone(f, n)) {
      f.gone_at = t;
      if (ev.replace) f.replace_at = t + ev.replace_delay_s;
    }
  }
  // Ended by the fault's consequences, not by the fault: only once the fault is over (a
  // partition healed, a duty cycle done) and only when the backend knows the process is gone
  // (the console's "dead" is also what a live, cut-off node is).
  if (ev.replace_if_exits && f.ended && f.gone_at < 0 && delivery_.gone(target_of(f)) == true) {
    f.gone_at = t;
    f.replace_at = t + ev.replace_delay_s;
    add_note(f.rec, "its process exited after the fault (fenced): replaced as its pod would be");
  }
  if (f.replace_at >= 0 && t >= f.replace_at && f.rec.replacement.empty()) start_replacement(f);
  if (f.replacement_starting) await_replacement(f);
  if (!f.rec.replacement.empty() && f.replacement_up_at < 0) {
    const node_view* r = last_.find(f.rec.replacement);
    if (r && r->state == "running") {
      f.replacement_up_at = t;
      f.committed_ref = last_.committed;  // productive means: committed grows from here
      f.iteration_ref = last_.iteration;
      f.ref_set = true;
    }
  }

  // ---- recovery -------------------------------------------------------------------------
  if (f.rec.recovered_at < 0 && last_.console_ok && f.ref_set) {
    bool ready = last_.committed > f.committed_ref;
    if (ev.role == "trainer") ready = ready && last_.iteration > f.iteration_ref;
    if (ev.replace || (ev.replace_if_exits && f.gone_at >= 0))
      ready = ready && f.replacement_up_at >= 0;
    if (is_duty_cycle(ev.kind) || ev.kind == fault_kind::coordinator_restart) {
      ready = ready && f.ended;
    }
    if (ready) f.rec.recovered_at = last_.t;
  }

  // ---- settled: recovered and nothing left to do ------------------------------------------
  const bool pending_actions = f.notice_at >= 0 || f.deadline_kill_at >= 0 || f.replace_at >= 0 ||
                               f.replacement_starting ||
                               ((is_duty_cycle(ev.kind) || ev.kind == fault_kind::partition ||
                                 ev.kind == fault_kind::coordinator_restart) &&
                                !f.ended);
  if (f.rec.recovered_at >= 0 && !pending_actions) f.step = fault_state::phase::settled;
}

}  // namespace moerl::sims::detail
