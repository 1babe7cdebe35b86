#include "up/local_job.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "actors/interruption.h"
#include "actors/job.h"
#include "common/child_process.h"
#include "common/log.h"
#include "env/env_client.h"
#include "up/weights_report.h"

namespace moerl::up {
namespace {

using nlohmann::json;
using clock = std::chrono::steady_clock;

constexpr int kConsoleTimeoutMs = 2000;
// `nodes` without the trainer's per-iteration lists (node states are what is looked at), and
// with the newest few (the progress display's last reward).
const std::vector<std::pair<std::string, std::string>> kNodesNoHistory{{"history", "0"}};
const std::vector<std::pair<std::string, std::string>> kNodesRecentHistory{{"history", "10"}};
constexpr auto kPollPeriod = std::chrono::milliseconds(500);  // the progress print period
// How long a node the coordinator declared dead may still run before it is killed. A node
// fences itself within milliseconds of its next exchange with the coordinator (node_agent.cpp:
// exit 5, or the coordinator's SIGKILL); CI once saw a SIGCONTed shard not exit for 9 s, until
// its job ended (CAF 0.17 drops a repeated handshake from a node it still routes over the old
// link, so a reconnect made then can go unanswered until the link times out).
constexpr auto kDeadGrace = std::chrono::milliseconds(3000);

std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("moerl");
}

// The trainer's job figures (reward curve, timings) from the coordinator's node view: a
// recreated trainer is listed next to its dead predecessor, and actors::joined_trainer_job
// takes the newest one's figures with the history of the ones before. An empty object when
// there are none (the modpow test job reports no job figures), so callers can use value() on it.
json trainer_job_stats(const json& nodes) {
  if (!nodes.is_array()) return json::object();
  std::vector<const json*> jobs;
  for (const auto& n : nodes)
    if (n.value("role", "") == "trainer" && n.contains("stats") && n["stats"].is_object() &&
        n["stats"].contains("job") && n["stats"]["job"].is_object())
      jobs.push_back(&n["stats"]["job"]);
  return actors::joined_trainer_job(jobs);
}

// The coordinator's status as one line: where the job is and its work accounting.
std::string status_line(const json& s) {
  const json acct = s.value("accounting", json::object());
  char line[512];
  std::snprintf(line, sizeof line,
                "iteration %lu/%lu  units %lu  queue %lu  leases %lu  dispatched %lu  "
                "committed %lu = trained %lu + handed %lu + buffered %lu  lost %lu  "
                "duplicated %lu  invariant %s",
                s.value("iteration", 0ul), s.value("iterations", 0ul), s.value("units", 0ul),
                s.value("queue_depth", 0ul), s.value("leases", 0ul), acct.value("dispatched", 0ul),
                acct.value("committed", 0ul), acct.value("trained", 0ul), acct.value("handed", 0ul),
                acct.value("buffered", 0ul), acct.value("lost", 0ul), acct.value("duplicated", 0ul),
                s.value("invariant_ok", false) ? "ok" : "BROKEN");
  return line;
}

// The learning figures: the trainer's latest iteration and the samples trained per second
// since the last line (`last_trained` at `last_at`, both advanced here). "" until the
// trainer reports a reward curve.
std::string learning_figures(const json& job_stats, uint64_t trained, uint64_t& last_trained,
                             clock::time_point& last_at) {
  // value(), not operator[]: on a const json a missing key is undefined behaviour, and stats
  // sent before the first step carry no curve.
  if (!job_stats.is_object()) return "";
  const json curve = job_stats.value("reward_curve", json::array());
  if (!curve.is_array() || curve.empty() || !curve.back().is_object()) return "";
  const json& last = curve.back();
  const double dt = std::chrono::duration<double>(clock::now() - last_at).count();
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "  mean_reward %.3f (random %.3f, max %.1f)  samples/s %.0f  staleness %.2f",
                last.value("mean_reward", 0.0), job_stats.value("reward_random", 0.0),
                job_stats.value("reward_max", 1.0),
                dt > 0 ? double(trained - last_trained) / dt : 0.0, last.value("staleness", 0.0));
  last_at = clock::now();
  last_trained = trained;
  return buf;
}

}  // namespace

result<std::unique_ptr<local_job>> local_job::configure(local_job_options o) {
  cluster_options co;
  co.binary = o.binary.empty() ? self_exe() : o.binary;
  co.config_file = o.config_file;
  co.overrides = std::move(o.overrides);
  if (!o.store_prefix.empty()) {
    co.overrides.push_back("ledger.store_prefix=" + o.store_prefix + "/ledger");
    co.overrides.push_back("job.store_prefix=" + o.store_prefix + "/job");
  }
  if (o.iterations > 0) co.overrides.push_back("actors.iterations=" + std::to_string(o.iterations));
  co.console = std::move(o.console);
  co.log_dir = std::move(o.log_dir);
  co.nodes = std::move(o.nodes);
  auto cfg = config::load(co.config_file, co.overrides);
  if (!cfg) return cfg.err();
  auto limits = restart_limits::from_config(*cfg);
  if (!limits) return limits.err();
  // The environment plane (env/ENV.md): env nodes when the config asks for them.
  for (int64_t k = 0; k < cfg->get_int("env.nodes"); ++k)
    co.nodes.push_back({"env", "env-" + std::to_string(k), {}});
  // More checkpoint caches (weights/) when the config asks for them: weights-0 is always there.
  for (int64_t k = 1; k < cfg->get_int("weights.nodes"); ++k)
    co.nodes.push_back({"weights", "weights-" + std::to_string(k), {}});
  // The children inherit this process's environment; 0: an explicit setting wins.
  if (o.one_blas_thread_per_node) ::setenv("OPENBLAS_NUM_THREADS", "1", 0);
  return std::unique_ptr<local_job>(new local_job(std::move(co), std::move(*cfg), *limits));
}

status local_job::start() {
  started_at_ = clock::now();
  auto cluster = local_cluster::start(cluster_opts_);
  if (!cluster) return cluster.err();
  cluster_ = std::move(*cluster);
  return ok_status();
}

status local_job::add_node(const node_spec& spec, const std::vector<std::string>& exec_prefix) {
  return cluster_->add_node(spec, exec_prefix);
}

status local_job::stop(int64_t timeout_ms) {
  if (!cluster_) return ok_status();
  return cluster_->stop(timeout_ms);
}

status local_job::schedule_replacement(const std::string& name, int wait_status,
                                       const job_events& events) {
  const std::string cause = describe_wait_status(wait_status);
  const std::string role = cluster_->role_of(name);
  auto diagnosis = [&](const std::string& why) {
    return error(errc::peer_dead, name + " (" + role + ") " + cause + ": " + why +
                                      "; its log ends:\n" + cluster_->log_tail(name, 8));
  };
  if (auto why = gave_up(wait_status)) {
    // The node told the coordinator why before it exited (node_agent.cpp); without that
    // (the coordinator was down too) the exit status and the log tail are all there is.
    failed_node_ = name;
    failed_cause_ = reported_cause(name);
    if (!failed_cause_.empty()) return diagnosis("it gave up: " + failed_cause_);
    return diagnosis(*why);
  }
  const std::string& first = lineage_.try_emplace(name, name).first->second;
  const int64_t num_done = num_replaced_[first];
  if (num_done >= limits_.max_restarts) {
    return diagnosis("replaced " + std::to_string(num_done) +
                     " time(s) already (cluster.max_restarts); the job cannot make progress");
  }
  const auto delay = limits_.delay_after(num_done);
  pending_[name] = {cause, delay, clock::now() + delay};
  logger("local_job")
      ->warn("{} ({}) {}: {} in {} ms", name, role, cause,
             controller_of(role) == pod_controller::stateful_set ? "recreated" : "replaced",
             delay.count());
  if (events.exited) events.exited(name, cause, delay);
  return ok_status();
}

std::string local_job::reported_cause(const std::string& name) {
  auto nodes = cluster_->console("nodes", {}, kNodesNoHistory, kConsoleTimeoutMs);
  if (!nodes || !nodes->is_array()) return "";
  for (const auto& n : *nodes)
    if (n.value("name", "") == name && n.contains("gave_up")) return n.value("gave_up", "");
  return "";
}

status local_job::supervise(const job_events& events) {
  for (const auto& [name, wait_status] : cluster_->exited()) {
    if (!pending_.count(name)) {
      if (auto st = schedule_replacement(name, wait_status, events); !st) return st;
      continue;
    }
    const pending_replacement due = pending_[name];
    if (clock::now() < due.due) continue;
    pending_.erase(name);
    const std::string first = lineage_[name];
    const int64_t n = ++num_replaced_[first];
    replacement_record r;
    r.node = name;
    r.role = cluster_->role_of(name);
    r.cause = due.cause;
    r.delay_ms = due.delay.count();
    r.at_s = std::chrono::duration<double>(clock::now() - started_at_).count();
    r.started_unix_ms = actors::unix_now_ms();
    status started = ok_status();
    if (controller_of(r.role) == pod_controller::stateful_set) {
      r.replacement = name;
      const std::string console = cluster_->console_address(), http = cluster_->http_address();
      started = cluster_->restart(name);
      if (cluster_->console_address() != console)
        r.moved = "console at " + cluster_->console_address();
      if (cluster_->http_address() != http)
        r.moved += (r.moved.empty() ? "" : " and ") + ("dashboard at " + cluster_->http_address());
    } else {
      // A new pod of the Deployment: a new name, as Kubernetes gives it a new suffix.
      r.replacement = first + "-r" + std::to_string(n);
      started = cluster_->replace(name, r.replacement);
      lineage_.erase(name);
    }
    lineage_[r.replacement] = first;
    if (!started) r.error = started.err().to_string();
    replacements_.push_back(r);
    if (events.replaced) events.replaced(r);
    if (!started) {
      return error(started.err().code,
                   "replacing " + name + " (" + r.role + ", " + r.cause + ") failed: " + r.error);
    }
  }
  return ok_status();
}

void local_job::kill_dead_but_running(const json& nodes, const job_events& events) {
  if (!nodes.is_array()) return;
  std::map<std::string, clock::time_point> still;
  for (const auto& n : nodes) {
    if (n.value("state", "") != "dead") continue;
    const std::string name = n.value("name", "");
    // Only the process this job runs under that name, with the pid the coordinator knew: a
    // StatefulSet node recreated under its name is a new process with a new pid.
    const pid_t pid = cluster_->pid_of(name);
    if (pid <= 0 || n.value("pid", 0L) != static_cast<long>(pid)) continue;
    const std::string key = name + " " + std::to_string(pid);
    auto seen = dead_but_running_.find(key);
    const auto since = seen == dead_but_running_.end() ? clock::now() : seen->second;
    if (clock::now() - since < kDeadGrace) {
      still[key] = since;
      continue;
    }
    const std::string why = n.value("down_reason", "declared dead");
    logger("local_job")
        ->warn("{} (pid {}) still runs {} ms after the coordinator declared it dead ({}): killed",
               name, pid, kDeadGrace.count(), why);
    (void)cluster_->signal(name, SIGKILL);
    if (events.killed_dead) events.killed_dead(name, why);
  }
  dead_but_running_ = std::move(still);
}

void local_job::interrupt_a_rollout(const run_policy& policy, const job_events& events) {
  auto nodes = cluster_->console("nodes", {}, kNodesNoHistory, kConsoleTimeoutMs);
  if (!nodes) return;
  for (const auto& n : *nodes) {
    if (n.value("role", "") != "rollout" || n.value("state", "") != "running") continue;
    const std::string name = n.value("name", "");
    // Only a node this job started and that still runs under the pid the coordinator knows.
    const pid_t pid = cluster_->pid_of(name);
    if (pid <= 0 || n.value("pid", 0L) != static_cast<long>(pid)) continue;
    auto sent = cluster_->console("inject", {"spot", name},
                                  {{"deadline", std::to_string(policy.spot_deadline_s)}}, 3000);
    if (events.spot_notice) {
      events.spot_notice(name, policy.spot_deadline_s, sent ? ok_status() : status(sent.err()));
    }
    return;
  }
}

run_outcome local_job::run(const run_policy& policy, const job_events& events) {
  bool interrupted = !policy.spot_interruption;
  std::string last_line;
  json job_stats;
  auto last_progress = clock::now();
  uint64_t last_trained = 0;
  while (clock::now() < policy.deadline) {
    if (auto st = supervise(events); !st) {
      failure_ = st.err().message;
      return run_outcome::failed;
    }
    // While the coordinator restarts its console does not answer: keep polling.
    auto s = cluster_->console("status", {}, {}, kConsoleTimeoutMs);
    if (s) {
      last_status_ = *s;
      const std::string line = status_line(*s);
      // The newest entries only: the progress line and display show the last iteration's
      // reward, and the whole lists grew to ~400 KB by iteration 800, built, sent and parsed
      // twice a second.
      if (auto nodes = cluster_->console("nodes", {}, kNodesRecentHistory, kConsoleTimeoutMs)) {
        auto js = trainer_job_stats(*nodes);
        if (!js.is_null()) job_stats = js;
        kill_dead_but_running(*nodes, events);
      }
      const std::string learn = learning_figures(
          job_stats, (*s)["accounting"].value("trained", 0ul), last_trained, last_progress);
      const uint64_t iteration = s->value("iteration", 0ul);
      if (!interrupted && iteration * 3 >= s->value("iterations", 0ul) && iteration > 0) {
        // Once tried, never again: a refused notice is reported, not retried every poll.
        interrupt_a_rollout(policy, events);
        interrupted = true;
      }
      if ((line != last_line || !learn.empty()) && events.progress) events.progress(line + learn);
      if (events.polled) events.polled(*s, job_stats);
      last_line = line;
      if (s->value("done", false)) return run_outcome::done;
    }
    std::this_thread::sleep_for(kPollPeriod);
  }
  return run_outcome::timed_out;
}

json local_job::settled_report(bool done) {
  // "Done" means every committed group was handed to the trainer; the trainer may still hold
  // the last, short iteration until its flush (actors.trainer_flush_ms) steps on it, and its
  // stats arrive once a second after announcing a version. Wait for stats sent after done
  // that show nothing held and the coordinator's version, or the report misses the last step
  // (and a resume would start past the report's last version).
  const auto settled_from = clock::now() + std::chrono::milliseconds(1200);
  const auto give_up =
      settled_from + std::chrono::milliseconds(config_.get_int("actors.trainer_flush_ms") + 8000);
  auto report = cluster_->console("report", {}, {}, 5000);
  auto trainer_settled = [&] {
    auto js = trainer_job_stats((*report)["nodes"]);
    if (js.is_null() || js.empty()) return true;  // a job without a learning step holds nothing
    return clock::now() >= settled_from && js.value("pending_groups", 0ul) == 0 &&
           js.value("policy_version", 0ul) >= report->value("policy_version", 0ul);
  };
  while (done && report && !trainer_settled() && clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    report = cluster_->console("report", {}, {}, 5000);
  }
  json out;
  if (report) {
    out = *report;
  } else {
    // The accounting as it stood when the console last answered.
    out = json{{"error", report.err().to_string()}};
    if (last_status_.is_object()) {
      out["accounting"] = last_status_.value("accounting", json::object());
      out["accounting"]["invariant_ok"] = last_status_.value("invariant_ok", false);
      out["accounting_from"] = "the last status the console answered";
    }
  }
  json replaced = json::array();
  for (const auto& r : replacements_)
    replaced.push_back(
        report ? with_time_to_productive(r.to_json(), r.started_unix_ms, (*report)["nodes"])
               : r.to_json());
  out["replacements"] = replaced;
  out["num_replacements"] = replacements_.size();
  out["restart_policy"] = restart_policy_json();
  if (!failure_.empty()) out["failure"] = failure_;
  if (!failed_node_.empty()) {
    out["failed_node"] = failed_node_;
    if (!failed_cause_.empty()) out["failure_cause"] = failed_cause_;
  }
  if (!report) return out;
  auto js = trainer_job_stats((*report)["nodes"]);
  if (!js.is_null()) {
    for (const char* k :
         {"task", "difficulty", "reward_random", "reward_max", "reward_curve", "iterations",
          "resumed_from_version", "reward_single_turn_bound", "reward_open_loop_bound"})
      if (js.contains(k)) out[k] = js[k];
    out["policy_iterations"] = out["iterations"].size();
    if (js.contains("env")) out["env"] = env::env_report(js["env"], (*report)["nodes"]);
    if (auto w = weights_report(js, (*report)["nodes"]); !w.is_null()) out["weights"] = w;
  }
  return out;
}

}  // namespace moerl::up
