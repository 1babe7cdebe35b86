#include "up/up_run.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <functional>

#include <yaml-cpp/yaml.h>

#include "common/config.h"
#include "console/chrome_trace.h"
#include "console/http_console.h"
#include "job/device.h"
#include "job/grpo_job.h"
#include "provenance/provenance.h"
#include "report/report_html.h"
#include "store/checkpoint.h"
#include "store/object_store.h"

namespace moerl::up {
namespace {

using nlohmann::json;

// The job.store_prefix of the newest earlier run with a committed checkpoint ("" if none).
// Run ids start with the unix time in seconds, so the sorted listing is chronological.
result<std::string> latest_resumable_run(const config& cfg) {
  auto st = store::open_store(cfg.get_string("store.url"), cfg);
  if (!st) return st.err();
  auto keys = (*st)->list("runs/");
  if (!keys) return keys.err();
  std::string best;
  for (const auto& k : *keys) {
    auto pos = k.find("/job/checkpoints/");
    if (pos == std::string::npos || k.size() < 10 ||
        k.compare(k.size() - 10, 10, "/COMMITTED") != 0)
      continue;
    std::string prefix = k.substr(0, pos + 4);
    if (prefix > best && store::latest_committed(**st, job::checkpoint_prefix(prefix)))
      best = prefix;
  }
  return best;
}

// The run's id: the unix time in seconds (so a sorted listing of runs is chronological),
// then this process's pid.
std::string new_run_id() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now).count()) + "-" +
         std::to_string(::getpid());
}

// `moerl up` runs its GRPO trainer as kUpTrainerMembers node processes unless the config file or
// an override sets trainer.group_size. A group of N > 1 holds job.trainer_ep_ranks = 1 rank per
// member unless that is set too, so the group's EP step has as many ranks as members. Returns
// the number of trainer nodes to start. 2 (trainer-0 and trainer-1, one trainer group): since a
// step's answer round carries the members' shares and moments (job/ep_trainer.cpp), a group
// step with its publication and checkpoint costs about what the one-process trainer's does,
// and the run is bound by generation on the 2 shared cores (docs/GUIDE.md, "The main job").
constexpr uint32_t kUpTrainerMembers = 2;

// Whether the config file (already validated by config::load) or an override sets `key`,
// even to its default: a section path (trainer: group_size:) or a dotted key at any level.
bool config_names(const std::string& config_file, const std::vector<std::string>& overrides,
                  const std::string& key) {
  for (const auto& o : overrides)
    if (o.rfind(key + "=", 0) == 0) return true;
  if (config_file.empty()) return false;
  std::function<bool(const YAML::Node&, const std::string&)> walk = [&](const YAML::Node& n,
                                                                        const std::string& at) {
    if (!n.IsMap()) return false;
    for (const auto& entry : n) {
      const std::string k = (at.empty() ? "" : at + ".") + entry.first.as<std::string>();
      if (k == key || (key.rfind(k + ".", 0) == 0 && walk(entry.second, k))) return true;
    }
    return false;
  };
  try {
    return walk(YAML::LoadFile(config_file), "");
  } catch (const YAML::Exception&) {
    return false;  // config::load read it; unreadable now: as if unset
  }
}

uint32_t default_trainer_members(const config& pre, const std::string& config_file,
                                 std::vector<std::string>& overrides) {
  auto named = [&](const std::string& key) { return config_names(config_file, overrides, key); };
  if (pre.get_string("job.kind") != "grpo")
    return static_cast<uint32_t>(pre.get_int("trainer.group_size"));
  auto members = static_cast<uint32_t>(pre.get_int("trainer.group_size"));
  // An external trainer (trainer.worker) is one worker process unless trainer.group_size is
  // set (a Python trainer group: one worker per member, python/WORKERS.md).
  if (!named("trainer.group_size") && !pre.get_string("trainer.worker").empty()) return 1;
  if (!named("trainer.group_size")) {
    members = kUpTrainerMembers;
    overrides.insert(overrides.begin(), "trainer.group_size=" + std::to_string(members));
  }
  if (members <= 1) return members;
  if (!named("job.trainer_ep_ranks")) overrides.insert(overrides.begin(), "job.trainer_ep_ranks=1");
  return members;
}

// `moerl up` runs its two rollout nodes as one rollout EP group across node processes
// (rollout.group_size = 2, one rank each: the model sharded over rollout-0 and rollout-1) unless
// the config file or an override sets rollout.group_size, the task is multi-turn (one rank), or
// an external worker generates (rollout.worker: one process per node unless the config names
// rollout.group_size, a Python rollout group: python/WORKERS.md "Rollout groups").
// Measured back to back on the shared 2-core machine (load 18-30): the default run reached a
// 10-iteration mean reward of 0.9 at iteration 338, 267 s in, against 353 / 242 s with every
// rollout node its own in-process EP instance (actors/RUNTIME.md, "Rollout groups across nodes").
constexpr uint32_t kUpRolloutMembers = 2;

// True when it made the group (then the run has one rollout worker: the group's leader).
bool default_rollout_group(const config& pre, const std::string& config_file,
                           std::vector<std::string>& overrides) {
  auto named = [&](const std::string& key) { return config_names(config_file, overrides, key); };
  if (pre.get_string("job.kind") != "grpo" || pre.get_string("task.name") == "guess" ||
      !pre.get_string("rollout.worker").empty() || named("rollout.group_size"))
    return false;
  overrides.insert(overrides.begin(), "rollout.group_size=" + std::to_string(kUpRolloutMembers));
  if (!named("job.rollout_ep_ranks")) overrides.insert(overrides.begin(), "job.rollout_ep_ranks=1");
  return true;
}

// `moerl up`'s GRPO job moves its work in batches: a rollout leases several units at a time
// (below; it generates 8 prompt groups as one batch, rollout.generate_batch_groups), the trainer
// takes up to 8 groups per batch (capped by what its step still needs), unless the config
// file or an override sets them. Each lease, unit report and trainer claim is a durable
// ledger write on the coordinator (an fsync, ~8 ms on this machine's disk), so fewer, larger
// requests shorten the iteration: measured in docs/GUIDE.md, "The main job".
// When the run's only rollout worker is the default rollout group's leader, it leases a whole
// iteration's units at once (actors.units_per_iteration): with half an iteration per lease
// the second half was leased only after the first had been generated and its reports made
// durable. Measured in 3 alternating runs each (6 Dec): 47-54 ms an iteration against 60-64,
// ~10% less CPU (bench/job_ep/results). Several workers keep 4, so that each gets a share of
// an iteration.
// An iteration's groups are cut into the largest units the ledger allows
// (ledger.max_groups_per_unit: 4 units of 4 groups instead of 8 of 2), unless the config file
// or an override sets either key. Each unit is a lease, a report, a shard's ack and (a unit's
// groups are generated together and delivered as one message) one message on each sample hop,
// so half the units is half those messages; a unit of 4 groups still fits a Spot notice many
// times over. Measured in bench/job_ep/results/README.md ("Fewer, larger units").
void default_batching(const config& pre, const std::string& config_file,
                      std::vector<std::string>& overrides, bool one_rollout_worker) {
  auto named = [&](const std::string& key) { return config_names(config_file, overrides, key); };
  if (pre.get_string("job.kind") != "grpo") return;
  int64_t units_per_iteration = pre.get_int("actors.units_per_iteration");
  int64_t groups_per_unit = pre.get_int("actors.groups_per_unit");
  if (!named("actors.units_per_iteration") && !named("actors.groups_per_unit")) {
    const int64_t groups = units_per_iteration * pre.get_int("actors.groups_per_unit");
    const int64_t per_unit = pre.get_int("ledger.max_groups_per_unit");
    if (groups % per_unit == 0) {
      units_per_iteration = groups / per_unit;
      groups_per_unit = per_unit;
      overrides.insert(overrides.begin(), "actors.groups_per_unit=" + std::to_string(per_unit));
      overrides.insert(overrides.begin(),
                       "actors.units_per_iteration=" + std::to_string(units_per_iteration));
    }
  }
  const bool lease_batch_named = named("actors.lease_batch");
  if (!lease_batch_named) {
    // At most actors.lease_batch's own bound: an iteration of more units takes several leases.
    const int64_t units = one_rollout_worker ? std::min<int64_t>(units_per_iteration, 4096) : 4;
    overrides.insert(overrides.begin(), "actors.lease_batch=" + std::to_string(units));
  }
  // The one rollout worker generates the whole iteration it leased as one batch (capped by the
  // key's bound): one pass of decode steps an iteration instead of two, so half the expert
  // exchanges between the rollout group's members, each a sleep and a wake-up in both.
  // 4 alternating rounds of 500 iterations (8 Dec): 34.0-35.1 ms an iteration against
  // 35.6-38.0 with batches of 8 groups (bench/job_ep/results/README.md).
  if (one_rollout_worker && !lease_batch_named && !named("rollout.generate_batch_groups")) {
    const int64_t groups = std::min<int64_t>(units_per_iteration * groups_per_unit, 256);
    overrides.insert(overrides.begin(), "rollout.generate_batch_groups=" + std::to_string(groups));
  }
  if (!named("actors.trainer_batch_groups"))
    overrides.insert(overrides.begin(), "actors.trainer_batch_groups=8");
}

}  // namespace

bool up_result::clean() const {
  auto acct = report.value("accounting", json::object());
  return outcome == run_outcome::done && acct.value("lost", 1ul) == 0 &&
         acct.value("duplicated", 1ul) == 0 && acct.value("invariant_ok", false);
}

result<std::unique_ptr<up_run>> up_run::prepare(up_options options) {
  std::unique_ptr<up_run> r(new up_run);
  r->t0_ = std::chrono::steady_clock::now();
  r->opts_ = std::move(options);
  r->run_id_ = new_run_id();
  const up_options& a = r->opts_;
  local_job_options o;
  uint32_t trainer_members = 1;
  o.config_file = a.config_file;
  o.overrides = a.overrides;
  o.store_prefix = "runs/" + r->run_id_;
  {
    auto pre = config::load(a.config_file, a.overrides);
    if (!pre) return error(errc::invalid_config, pre.err().message);
    // The coordinator would refuse these too, but only in its log: say it up front.
    if (auto st = console::check_http_console_config(*pre); !st)
      return error(errc::invalid_config, st.err().message);
    // Every node would refuse a job.device=cuda it cannot run (job/device.h) and be restarted
    // until cluster.max_restarts: refuse it once, before any node starts.
    if (auto st = job::check_job_device(*pre); !st) return st.err();
    // A GRPO run's length is grpo.iterations unless --iterations says otherwise.
    o.iterations = a.iterations;
    if (o.iterations <= 0 && pre->get_string("job.kind") == "grpo")
      o.iterations = pre->get_int("grpo.iterations");
    trainer_members = default_trainer_members(*pre, a.config_file, o.overrides);
    const bool one_rollout_worker = default_rollout_group(*pre, a.config_file, o.overrides);
    default_batching(*pre, a.config_file, o.overrides, one_rollout_worker);
    {  // Every node runs on this host: the whole trainer group's NCCL ranks share its devices.
      auto placed = config::load(a.config_file, o.overrides);
      if (!placed) return error(errc::invalid_config, placed.err().message);
      const int nccl_ranks =
          static_cast<int>(trainer_members * placed->get_int("job.trainer_ep_ranks"));
      if (auto st = job::check_trainer_devices(*placed, nccl_ranks, job::probe_device_facts()); !st)
        return st.err();
    }
    if (a.resume) {
      auto from = latest_resumable_run(*pre);
      if (!from) return error(from.err().code, "--resume: " + from.err().to_string());
      if (from->empty())
        return error(errc::not_found, "--resume: no earlier run has a committed checkpoint in " +
                                          pre->get_string("store.url"));
      r->resumed_from_ = *from;
      o.overrides.push_back("job.resume_from=" + *from);
    }
  }
  o.console = a.console;
  o.log_dir = a.run_dir + "/" + r->run_id_ + "/logs";
  o.one_blas_thread_per_node = true;
  o.nodes = default_cluster_nodes(trainer_members);
  r->num_nodes_ = o.nodes.size();
  r->log_dir_ = o.log_dir;
  auto job = local_job::configure(std::move(o));
  if (!job) return error(errc::invalid_config, job.err().message);
  r->job_ = std::move(*job);
  return r;
}

status up_run::start() { return job_->start(); }

up_result up_run::run(job_events events) {
  up_result out;
  run_policy policy;
  policy.deadline = t0_ + std::chrono::seconds(opts_.timeout_s);
  policy.spot_interruption = opts_.spot_interruption;
  out.outcome = job_->run(policy, std::move(events));
  out.report = job_->settled_report(out.outcome == run_outcome::done);
  if (!opts_.trace.empty()) {
    // The same trace /api/v1/trace serves, from the coordinator's snapshot view.
    auto snap = job_->cluster().console("snapshot", {}, {}, 5000);
    if (snap) {
      std::ofstream(opts_.trace) << console::chrome_trace(*snap).dump() << "\n";
      out.trace_path = opts_.trace;
    } else {
      out.trace_error = snap.err().to_string();
    }
  }
  out.report["run_id"] = run_id_;
  out.report["wall_s"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  out.report["provenance"] = collect_provenance();
  // A failed run has nothing left to finish: its nodes get less time to stop.
  auto stopped = job_->stop(out.outcome == run_outcome::failed ? 5000 : 15000);
  if (!stopped) out.stop_error = stopped.err().message;
  out.report_path =
      opts_.report.empty() ? opts_.run_dir + "/" + run_id_ + "/report.json" : opts_.report;
  std::ofstream(out.report_path) << out.report.dump(2) << "\n";
  // The page beside it: report.json's name with .html for .json (report.html by default).
  std::string html = out.report_path;
  if (html.size() > 5 && html.compare(html.size() - 5, 5, ".json") == 0)
    html.resize(html.size() - 5);
  html += ".html";
  if (auto st = report::write_report_html({{out.report_path, out.report}}, html); st)
    out.html_path = html;
  else
    out.html_error = st.err().message;
  return out;
}

}  // namespace moerl::up
