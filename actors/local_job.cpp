#include "actors/local_job.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "common/child_process.h"

namespace moerl::actors {
namespace {

using nlohmann::json;
using clock = std::chrono::steady_clock;

constexpr int kConsoleTimeoutMs = 2000;
constexpr auto kPollPeriod = std::chrono::milliseconds(500);  // the progress print period

std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("moerl");
}

// The trainer's job figures (reward curve, timings) from the coordinator's node view.
// An empty object when there are none (the modpow test job reports no job figures), so
// callers can use value() on it.
json trainer_job_stats(const json& nodes) {
  if (!nodes.is_array()) return json::object();
  for (const auto& n : nodes)
    if (n.value("role", "") == "trainer" && n.contains("stats") && n["stats"].contains("job") &&
        n["stats"]["job"].is_object())
      return n["stats"]["job"];
  return json::object();
}

// The coordinator's status as one line: where the job is and its work accounting.
std::string status_line(const json& s) {
  const json acct = s.value("accounting", json::object());
  char line[512];
  std::snprintf(line, sizeof line,
                "iteration %lu/%lu  units %lu  queue %lu  leases %lu  dispatched %lu  "
                "committed %lu  trained %lu  lost %lu  duplicated %lu  invariant %s",
                s.value("iteration", 0ul), s.value("iterations", 0ul), s.value("units", 0ul),
                s.value("queue_depth", 0ul), s.value("leases", 0ul), acct.value("dispatched", 0ul),
                acct.value("committed", 0ul), acct.value("trained", 0ul), acct.value("lost", 0ul),
                acct.value("duplicated", 0ul), s.value("invariant_ok", false) ? "ok" : "BROKEN");
  return line;
}

// The learning figures: the trainer's latest iteration and the samples trained per second
// since the last line (`last_trained` at `last_at`, both advanced here). "" until the
// trainer reports a reward curve.
std::string learning_figures(const json& job_stats, uint64_t trained, uint64_t& last_trained,
                             clock::time_point& last_at) {
  // const json: operator[] on a missing key is undefined behaviour, so look before reading.
  if (!job_stats.is_object() || !job_stats.contains("reward_curve")) return "";
  const json& curve = job_stats.at("reward_curve");
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
  // The children inherit this process's environment; 0: an explicit setting wins.
  if (o.one_blas_thread_per_node) ::setenv("OPENBLAS_NUM_THREADS", "1", 0);
  return std::unique_ptr<local_job>(new local_job(std::move(co), std::move(*cfg)));
}

status local_job::start() {
  auto cluster = local_cluster::start(cluster_opts_);
  if (!cluster) return cluster.err();
  cluster_ = std::move(*cluster);
  return ok_status();
}

status local_job::add_node(const node_spec& spec, const std::vector<std::string>& exec_prefix) {
  return cluster_->add_node(spec, exec_prefix);
}

void local_job::replace_after_drain(const std::string& name, std::chrono::seconds delay) {
  replacements_[name] = {delay, {}};
}

status local_job::stop(int64_t timeout_ms) {
  if (!cluster_) return ok_status();
  return cluster_->stop(timeout_ms);
}

status local_job::supervise(const job_events& events) {
  for (auto& [name, wait_status] : cluster_->exited()) {
    if (name == "coordinator") {
      return error(errc::internal, "the coordinator exited (" + describe_wait_status(wait_status) +
                                       "); see its log");
    }
    auto it = replacements_.find(name);
    if (it == replacements_.end()) continue;
    pending_replacement& r = it->second;
    if (r.due == clock::time_point{}) {
      // Seen exited for the first time: the replacement joins after the delay.
      r.due = clock::now() + r.delay;
      if (events.drained) events.drained(name, wait_status, r.delay);
    } else if (clock::now() >= r.due) {
      const status started = cluster_->restart(name);
      if (events.replaced) events.replaced(name, started);
      replacements_.erase(it);
    }
  }
  return ok_status();
}

void local_job::interrupt_a_rollout(const run_policy& policy, const job_events& events) {
  auto nodes = cluster_->console("nodes", {}, {}, kConsoleTimeoutMs);
  if (!nodes) return;
  for (const auto& n : *nodes) {
    if (n.value("role", "") != "rollout" || n.value("state", "") != "running") continue;
    const std::string name = n.value("name", "");
    auto sent = cluster_->console("inject", {"spot", name},
                                  {{"deadline", std::to_string(policy.spot_deadline_s)}}, 3000);
    if (events.spot_notice) {
      events.spot_notice(name, policy.spot_deadline_s, sent ? ok_status() : status(sent.err()));
    }
    if (sent) replace_after_drain(name, policy.replacement_delay);
    return;
  }
}

result<bool> local_job::run(const run_policy& policy, const job_events& events) {
  bool interrupted = !policy.spot_interruption;
  std::string last_line;
  json job_stats;
  auto last_progress = clock::now();
  uint64_t last_trained = 0;
  while (clock::now() < policy.deadline) {
    if (auto st = supervise(events); !st) return st.err();
    auto s = cluster_->console("status", {}, {}, kConsoleTimeoutMs);
    if (s) {
      const std::string line = status_line(*s);
      if (auto nodes = cluster_->console("nodes", {}, {}, kConsoleTimeoutMs)) {
        auto js = trainer_job_stats(*nodes);
        if (!js.is_null()) job_stats = js;
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
      last_line = line;
      if (s->value("done", false)) return true;
    }
    std::this_thread::sleep_for(kPollPeriod);
  }
  return false;
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
  if (!report) return json{{"error", report.err().to_string()}};
  json out = *report;
  auto js = trainer_job_stats((*report)["nodes"]);
  if (!js.is_null()) {
    for (const char* k : {"task", "difficulty", "reward_random", "reward_max", "reward_curve",
                          "iterations", "resumed_from_version"})
      if (js.contains(k)) out[k] = js[k];
    out["policy_iterations"] = out["iterations"].size();
  }
  return out;
}

}  // namespace moerl::actors
