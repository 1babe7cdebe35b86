// Setting a run up (local cluster or attached job), running the fault timeline and the
// fault-free baseline, and collecting the measurements. The loop itself is sims/runner.cpp.
#include "sims/sim_run.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>
#include <thread>

#include "common/config.h"
#include "common/posix_check.h"
#include "common/status_try.h"
#include "sims/fault_delivery.h"
#include "sims/job_console.h"
#include "sims/netns_link.h"
#include "sims/process_control.h"
#include "sims/runner.h"
#include "sims/timeline.h"
#include "up/local_job.h"
#include "zmq/plane_context.h"

namespace moerl::sims {

namespace {

// A fresh work directory for one simulation run (node logs, reports) under /tmp.
result<std::string> make_work_dir() {
  char tmpl[] = "/tmp/moerl-sim-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr)
    return ::moerl::detail::posix_error("mkdtemp", "a work directory in /tmp", __FILE__, __LINE__,
                                        errno);
  return std::string(tmpl);
}

using detail::job_hooks;
using detail::runner;

// Roles whose nodes only connect out, so they still work inside a namespace whose
// 127.0.0.0/8 leads to the host (sims/netns_link.h).
bool partitionable_role(const std::string& role) {
  return role == "rollout" || role == "trainer" || role == "weights" || role == "env";
}

// Polls `nodes` until every name in `names` is running, or the timeout passes.
status wait_running(job_console& console, const std::set<std::string>& names, int64_t timeout_ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string missing;
  for (;;) {
    missing.clear();
    auto body = console.call("nodes");
    auto nodes = body ? parse_nodes(*body) : result<std::vector<node_view>>(body.err());
    for (const auto& want : names) {
      bool up = false;
      if (nodes) {
        for (const auto& n : *nodes) up = up || (n.name == want && n.state == "running");
      }
      if (!up) missing += " " + want;
    }
    if (missing.empty()) return ok_status();
    if (std::chrono::steady_clock::now() >= until) {
      return error{errc::timeout,
                   "nodes not running after " + std::to_string(timeout_ms) + " ms:" + missing +
                       (nodes ? std::string() : " (console: " + nodes.err().message + ")")};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// Command lines of every node the console lists, read from /proc (local pids only).
std::map<std::string, known_node> read_specs(job_console& console) {
  std::map<std::string, known_node> out;
  auto body = console.call("nodes");
  if (!body) return out;
  auto nodes = parse_nodes(*body);
  if (!nodes) return out;
  for (const auto& n : *nodes) {
    if (n.pid <= 0 || n.state != "running") continue;
    if (auto s = read_launch_spec(n.pid)) out[n.name] = {n.role, *s};
  }
  return out;
}

// Why a pid from the console must not be signalled: it is not a `moerl node` on this host.
std::string not_a_local_node(const node_view& n) {
  if (n.pid <= 1) return "node " + n.name + " reports no usable pid";
  auto spec = read_launch_spec(n.pid);
  if (!spec)
    return "node " + n.name + "'s pid " + std::to_string(n.pid) + " is not a process on this host";
  bool is_node = false;
  for (size_t i = 0; i + 1 < spec->argv.size(); ++i)
    is_node = is_node || spec->argv[i + 1] == "node";
  if (spec->argv.empty() || spec->argv[0].find("moerl") == std::string::npos || !is_node) {
    return "pid " + std::to_string(n.pid) +
           " on this host is not a `moerl node` process (another host's pid?)";
  }
  return "";
}

struct local_setup {
  std::unique_ptr<up::local_job> job;
  std::unique_ptr<job_console> console;
  std::map<std::string, std::unique_ptr<netns_link>> links;  // partitioned node -> its link
};

// Starts a local job of the scenario's shape. Nodes in `partitioned` join once the others
// run, each inside its own network namespace.
result<local_setup> start_local(const scenario& s, const run_options& o, const config& cfg,
                                const std::string& work_dir,
                                const std::set<std::string>& partitioned, const std::string& tag) {
  local_setup ls;
  up::local_job_options jo;
  jo.binary = o.binary;
  jo.config_file = o.config_file;
  jo.overrides = s.cluster.set;
  jo.overrides.insert(jo.overrides.end(), o.overrides.begin(), o.overrides.end());
  // The job must outlive the scenario: iterations are effectively unbounded, the runner ends it.
  jo.iterations = 1000000;
  jo.overrides.push_back("actors.trainer_ranks=" + std::to_string(s.cluster.trainer_ranks));
  jo.overrides.push_back("trainer.group_size=" + std::to_string(s.cluster.trainer_members));
  // The scenario's cluster.env decides the env nodes, named and started below like every other
  // role (so a partition can start one inside a namespace), not the config's env.nodes.
  jo.overrides.push_back("env.nodes=0");
  jo.overrides.push_back("store.url=" + work_dir + "/store");
  jo.store_prefix = tag;
  ASSIGN_OR_RETURN(auto port, up::free_tcp_port());
  jo.console = "tcp://127.0.0.1:" + std::to_string(port);
  jo.log_dir = work_dir + "/" + tag + "-logs";
  const roster names = canonical_roster(s.cluster);
  std::vector<up::node_spec> namespaced;
  for (const char* role : {"buffer", "weights", "trainer", "reward", "env", "rollout"}) {
    auto it = names.find(role);
    if (it == names.end()) continue;
    for (const auto& name : it->second) {
      (partitioned.count(name) ? namespaced : jo.nodes).push_back({role, name, {}});
    }
  }
  std::set<std::string> expect;
  for (const auto& n : jo.nodes) expect.insert(n.name);
  const std::string console_address = jo.console;

  auto job = up::local_job::configure(std::move(jo));
  if (!job) return error{job.err().code, "starting the local cluster: " + job.err().message};
  ls.job = std::move(*job);
  if (auto st = ls.job->start(); !st) {
    return error{st.err().code, "starting the local cluster: " + st.err().message};
  }
  ls.console = std::make_unique<job_console>(console_address, cfg.get_string("console.token"),
                                             static_cast<int>(cfg.get_int("console.timeout_ms")));
  STATUS_TRY(wait_running(*ls.console, expect, 60000));

  int index = 0;
  for (const auto& node : namespaced) {
    ASSIGN_OR_RETURN(auto link, netns_link::create(index++));
    STATUS_TRY(ls.job->add_node(node, link->exec_prefix()));
    ls.links[node.name] = std::move(link);
    expect.insert(node.name);
  }
  STATUS_TRY(wait_running(*ls.console, expect, 60000));
  return ls;
}

// Ends a local run: shutdown through the console, then SIGKILL whatever the runner started.
void stop_local(local_setup& ls, const std::vector<pid_t>& spawned) {
  if (ls.job) (void)ls.job->stop(15000);
  for (pid_t p : spawned) {
    if (wait_exit(p, 3000).ok()) continue;
    (void)send_signal(p, SIGKILL);
    (void)wait_exit(p, 3000);
  }
  ls.job.reset();
  ls.links.clear();
}

// The counters of work units that drains returned and finished, from the coordinator's report.
nlohmann::json units_of(const result<nlohmann::json>& rep) {
  if (!rep) return nullptr;
  uint64_t returned = 0, finished = 0;
  const auto interruptions = rep->value("interruptions", nlohmann::json::array());
  for (const auto& i : interruptions) {
    if (i.contains("units_returned") && i["units_returned"].is_number_unsigned())
      returned += i["units_returned"].get<uint64_t>();
    if (i.contains("units_finished") && i["units_finished"].is_number_unsigned())
      finished += i["units_finished"].get<uint64_t>();
  }
  return {{"returned_by_drains", returned},
          {"finished_in_drains", finished},
          {"interruptions", interruptions.size()}};
}

// Every re-formation of the groups of `role` (the trainer group, rollout EP groups), from
// the coordinator's report (groups[].reformed), each with its group's name: [{group, at,
// cause, restored_version, downtime_s}].
nlohmann::json group_reformations(const result<nlohmann::json>& rep, const std::string& role) {
  nlohmann::json out = nlohmann::json::array();
  if (!rep) return out;
  const auto groups = rep->value("groups", nlohmann::json::array());
  for (const auto& g : groups) {
    if (!g.is_object() || g.value("role", std::string()) != role) continue;
    const auto reformed = g.value("reformed", nlohmann::json::array());
    for (const auto& r : reformed) {
      if (!r.is_object()) continue;
      nlohmann::json e = r;
      e["group"] = g.value("name", std::string());
      out.push_back(std::move(e));
    }
  }
  return out;
}

// Refusals of the live shards (status.buffer: shard -> its stats), summed.
nlohmann::json shard_refusals(const nlohmann::json& status) {
  nlohmann::json out = {{"fenced", 0}, {"duplicate", 0}, {"purged", 0}, {"stale_policy", 0}};
  const auto buffers = status.value("buffer", nlohmann::json::object());
  if (!buffers.is_object()) return out;
  for (const auto& [shard, st] : buffers.items()) {
    if (!st.is_object()) continue;
    for (auto& [key, total] : out.items()) {
      if (st.contains(key) && st[key].is_number_unsigned())
        total = total.get<uint64_t>() + st[key].get<uint64_t>();
    }
  }
  return out;
}

// Failed episodes of the environment plane by reason, summed over the rollout nodes listed
// (their stats' env.episodes_failed; a killed node's counts go with it).
nlohmann::json env_episodes_failed(const std::vector<node_view>& nodes) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& n : nodes) {
    if (n.role != "rollout" || !n.stats.is_object()) continue;
    const auto env = n.stats.value("env", nlohmann::json::object());
    const auto failed = env.is_object() ? env.value("episodes_failed", nlohmann::json::object())
                                        : nlohmann::json::object();
    if (!failed.is_object()) continue;
    for (const auto& [why, count] : failed.items()) {
      if (count.is_number_unsigned())
        out[why] = out.value(why, uint64_t{0}) + count.get<uint64_t>();
    }
  }
  return out;
}

void fill_from(run_measurements& m, runner& r, job_console& console) {
  m.faults = r.records();
  m.collateral_losses = r.collateral_losses();
  m.iteration_s = r.iteration_s();
  m.trainer_restarts = r.trainer_restarts();
  m.ungrouped_trainer_restarts = r.ungrouped_trainer_restarts();
  const auto& last = r.last();
  m.accounting =
      last.console_ok ? last.status.value("accounting", nlohmann::json()) : nlohmann::json();
  // The final word: one more status after the faults settled.
  if (auto st = console.call("status")) {
    m.accounting = st->value("accounting", nlohmann::json());
    m.shards = shard_refusals(*st);
  } else if (last.console_ok) {
    m.shards = shard_refusals(last.status);
  }
  const auto report = console.call("report");
  m.units = units_of(report);
  m.trainer_group_reformations = group_reformations(report, "trainer");
  m.rollout_group_reformations = group_reformations(report, "rollout");
  m.env_episodes_failed = env_episodes_failed(last.nodes);
  // Not reported (old trainers): -1, which the report shows as null.
  m.trainer_stall_s = r.stall().reported() ? r.stall().total_s() : -1;
  m.observed_s = r.observed_s();
}

result<run_measurements> run_local(const scenario& s, const run_options& o, const config& cfg,
                                   run_measurements m) {
  ASSIGN_OR_RETURN(auto timeline, expand(s, canonical_roster(s.cluster)));

  // Nodes the timeline partitions must start inside a namespace, if namespaces work here.
  std::set<std::string> partitioned;
  std::map<std::string, std::string> partition_skip;  // node -> why its partition is skipped
  const std::string netns_why = [&] {
    for (const auto& e : timeline) {
      if (e.kind == fault_kind::partition) return netns_link::unavailable_reason();
    }
    return std::string();
  }();
  for (const auto& e : timeline) {
    if (e.kind != fault_kind::partition) continue;
    if (!netns_why.empty()) {
      partition_skip[e.node] = "partition unavailable: " + netns_why;
    } else if (!partitionable_role(e.role)) {
      partition_skip[e.node] = "a " + e.role +
                               " node listens on 127.0.0.1, which a namespaced node "
                               "cannot share with the host; partitions cover rollout, trainer, "
                               "weights and env nodes";
    } else {
      partitioned.insert(e.node);
    }
  }

  std::string work_dir = o.work_dir;
  if (work_dir.empty()) {
    ASSIGN_OR_RETURN(auto made, make_work_dir());
    work_dir = made;
  }
  m.work_dir = work_dir;

  ASSIGN_OR_RETURN(auto ls, start_local(s, o, cfg, work_dir, partitioned, "faults"));
  local_setup& setup = ls;

  job_hooks hooks;
  hooks.coordinator_restartable = true;
  up::local_cluster* cluster = &setup.job->cluster();
  hooks.kill_coordinator = [cluster] { return cluster->signal("coordinator", SIGKILL); };
  hooks.restart_coordinator = [cluster] {
    // The killed coordinator must be reaped before local_cluster starts it again.
    (void)cluster->wait_exit("coordinator", 5000);
    return cluster->restart("coordinator");
  };
  hooks.why_not_partitionable = [&](const std::string& name) -> std::string {
    if (auto it = partition_skip.find(name); it != partition_skip.end()) return it->second;
    if (!setup.links.count(name))
      return "node " + name + " was not started inside a network namespace";
    return "";
  };
  hooks.link_of = [&](const std::string& name) -> netns_link* {
    auto it = setup.links.find(name);
    return it == setup.links.end() ? nullptr : it->second.get();
  };

  auto delivery = process_delivery(
      read_specs(*setup.console), work_dir + "/faults-logs", [](const node_view& n) {
        return n.pid > 1 ? std::string() : "node " + n.name + " reports no pid";
      });
  runner r(timeline, *setup.console, hooks, *delivery, o.poll_ms);
  r.run(s.duration_s, s.settle_s);
  r.undo_faults();
  fill_from(m, r, *setup.console);
  stop_local(setup, delivery->spawned());

  if (o.baseline) {
    // The same cluster, config and seed without faults. Iterations take well under a second
    // here, so 15 s of them estimate the fault-free iteration time as well as a longer run.
    auto base = start_local(s, o, cfg, work_dir, {}, "baseline");
    if (!base) {
      m.baseline_note = "baseline run failed to start: " + base.err().message;
    } else {
      auto none = process_delivery({}, work_dir + "/baseline-logs",
                                   [](const node_view&) { return std::string(); });
      runner b({}, *base->console, job_hooks{}, *none, o.poll_ms);
      b.run(std::min(s.duration_s, 15.0), 0.0);
      m.baseline_iteration_s = b.iteration_s();
      m.baseline_trainer_stall_s = b.stall().reported() ? b.stall().total_s() : -1;
      m.baseline_observed_s = b.observed_s();
      stop_local(*base, {});
    }
  } else {
    m.baseline_note = "baseline skipped (--no-baseline)";
  }
  return m;
}

result<run_measurements> run_attached(const scenario& s, const run_options& o, const config& cfg,
                                      run_measurements m) {
  ASSIGN_OR_RETURN(auto address, console_address_of(o.against));
  ASSIGN_OR_RETURN(auto keys, zmq::admin_plane_keys(cfg, address));  // CURVE off loopback
  job_console console(address, cfg.get_string("console.token"),
                      static_cast<int>(cfg.get_int("console.timeout_ms")), std::move(keys));
  auto body = console.call("nodes");
  if (!body) return error{body.err().code, "console at " + address + ": " + body.err().message};
  ASSIGN_OR_RETURN(auto nodes, parse_nodes(*body));
  roster live;
  for (const auto& n : nodes) {
    if (n.state == "running") live[n.role].push_back(n.name);
  }
  live["coordinator"].push_back("coordinator");
  ASSIGN_OR_RETURN(auto timeline, expand(s, live));

  job_hooks hooks;
  hooks.coordinator_restartable = false;
  hooks.why_not_partitionable = [](const std::string& name) {
    return "attach mode: " + name + " was not started inside a network namespace by this runner";
  };
  hooks.link_of = [](const std::string&) -> netns_link* { return nullptr; };
  ASSIGN_OR_RETURN(auto made, make_work_dir());
  m.work_dir = made;
  // The nodes' hands: signals to moerl node processes on this host, or the command that
  // strikes and replaces them where they run (--deliver-via: pods).
  std::unique_ptr<fault_delivery> delivery;
  if (o.deliver_via.empty()) {
    delivery = process_delivery(read_specs(console), m.work_dir, not_a_local_node);
  } else {
    ASSIGN_OR_RETURN(auto made_delivery, command_delivery(o.deliver_via, m.work_dir));
    delivery = std::move(made_delivery);
  }
  runner r(timeline, console, hooks, *delivery, o.poll_ms);
  r.run(s.duration_s, s.settle_s);
  r.undo_faults();
  fill_from(m, r, console);
  // No second job to compare with: the iterations that ended before the first fault are
  // the fault-free reference.
  double first_fault = -1;
  for (const auto& f : m.faults) {
    if (f.injected_at >= 0 && (first_fault < 0 || f.injected_at < first_fault))
      first_fault = f.injected_at;
  }
  double t = 0;
  std::vector<double> before, after;
  for (double d : m.iteration_s) {
    t += d;
    (first_fault < 0 || t <= first_fault ? before : after).push_back(d);
  }
  m.baseline_iteration_s = before;
  m.baseline_note = "attach mode: baseline is the iterations that ended before the first fault";
  return m;
}

}  // namespace

result<run_measurements> run_scenario(const scenario& s, const run_options& o) {
  std::vector<std::string> overrides = s.cluster.set;
  overrides.insert(overrides.end(), o.overrides.begin(), o.overrides.end());
  ASSIGN_OR_RETURN(auto cfg, config::load(o.config_file, overrides));
  if (!o.deliver_via.empty() && o.against.empty()) {
    return error{errc::invalid_argument,
                 "--deliver-via needs --against: a local cluster's nodes are this runner's own "
                 "processes"};
  }
  run_measurements m;
  m.scenario = s.name;
  m.file = s.file;
  m.seed = s.seed;
  m.short_form = o.short_form;
  m.target = o.against.empty() ? "local cluster" : o.against;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = o.against.empty() ? run_local(s, o, cfg, std::move(m))
                             : run_attached(s, o, cfg, std::move(m));
  if (r) r->wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace moerl::sims
