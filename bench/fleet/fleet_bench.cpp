#include "bench/fleet/fleet_bench.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/fleet/fleet_analysis.h"
#include "bench/fleet/host_process.h"
#include "bench/fleet/sim_host.h"
#include "bench/fleet/tick_cost.h"
#include "bench/support.h"
#include "common/temp_dir.h"
#include "provenance/provenance.h"
#include "up/local_cluster.h"

namespace moerl::bench {
namespace {

using nlohmann::json;

struct fleet_args {
  bool json_out = false;
  uint32_t nodes = 1000;
  uint32_t hosts = 4;
  // 2 s units: a thousand nodes ask for 500 units/s (seconds of work per unit, as DESIGN.md
  // wants units to fit inside a Spot notice).
  int64_t unit_ms = 2000;
  uint32_t lease_batch = 1;
  uint32_t samples_per_group = 2;
  uint32_t work_rounds = 16;
  int64_t heartbeat_ms = 500;
  double warmup_s = 3, measure_s = 10, fault_s = 8;
  double fraction = 0.1;
  int64_t notice_ms = 800;  // < unit + margin: some units fit, some are given back
  double recovery_ratio = 0.9;
  bool skip_faults = false;
  uint32_t snapshot_every = 0;                             // 0: the config's ledger.snapshot_every
  uint32_t units_per_iteration = 0;                        // 0: 10 per node
  std::vector<uint64_t> tick_cost_units{100000, 1000000};  // besides the run's own
  std::string run_dir;  // kept: the nodes' logs and the hosts' records (else a temp dir)
  // Internal: run as one simulated host (sim_host.h).
  std::string sim_join, sim_out;
  uint32_t sim_nodes = 0, sim_index = 0;
  std::vector<std::string> sim_overrides;
};

// Every node's configuration (the coordinator's, the shards', the trainer's and the
// simulated nodes'): the modpow job (the trainer verifies each sample); no fsync (the journal
// still writes every lease before it is answered). The control plane is what is measured, so
// the other planes must not pace the fleet: the unit pool holds 10 units per node per
// iteration (the coordinator opens at most two iterations ahead of the trainer's version),
// and the shards hold what the one trainer process has not consumed yet (on this 2-core
// machine it trails a thousand nodes: `trained` < `committed` in the books) without refusing
// credit or dropping samples as stale.
std::vector<std::string> fleet_overrides(const fleet_args& a, const std::string& dir) {
  std::vector<std::string> o{
      "store.url=" + dir + "/store", "store.local_fsync=false", "job.kind=modpow",
      "actors.groups_per_unit=1", "ledger.group_size=" + std::to_string(a.samples_per_group),
      "actors.work_rounds=" + std::to_string(a.work_rounds), "actors.iterations=1000000",
      "actors.units_per_iteration=" +
          std::to_string(a.units_per_iteration
                             ? a.units_per_iteration
                             : std::min<uint32_t>(1000000, std::max<uint32_t>(64, 10 * a.nodes))),
      "buffer.capacity_samples=" + std::to_string(uint64_t{1} << 24),
      "buffer.capacity_bytes=" + std::to_string(uint64_t{1} << 34), "buffer.max_staleness=1000000",
      "actors.lease_batch=" + std::to_string(a.lease_batch),
      "ledger.lease_timeout_ms=" + std::to_string(std::max<int64_t>(30000, 10 * a.unit_ms)),
      "actors.trainer_batch_groups=256", "actors.trainer_ranks=1",
      "node.heartbeat_interval_ms=" + std::to_string(a.heartbeat_ms),
      "node.connection_timeout_ms=" + std::to_string(std::max<int64_t>(3000, 6 * a.heartbeat_ms)),
      // A host process simulates up to thousands of nodes, each with its own connection to
      // each shard from the host's one address: the shards must not bound it per address.
      "node.zmq_max_connections_per_peer=0", "log.level=warn"};
  if (a.snapshot_every) o.push_back("ledger.snapshot_every=" + std::to_string(a.snapshot_every));
  return o;
}

host_process spawn_host(const fleet_args& a, const std::string& join, uint32_t index,
                        uint32_t nodes, const std::vector<std::string>& overrides,
                        const std::string& dir) {
  const std::string out_file = dir + "/host-" + std::to_string(index) + ".json";
  std::vector<std::string> args{"bench",         "fleet",
                                "--sim-join",    join,
                                "--sim-nodes",   std::to_string(nodes),
                                "--sim-index",   std::to_string(index),
                                "--sim-out",     out_file,
                                "--unit-ms",     std::to_string(a.unit_ms),
                                "--lease-batch", std::to_string(a.lease_batch)};
  for (const auto& kv : overrides) {
    args.push_back("--sim-set");
    args.push_back(kv);
  }
  host_process h = need(host_process::spawn(args, dir + "/host-" + std::to_string(index) + ".log"),
                        "simulated host " + std::to_string(index));
  h.record_file = out_file;
  return h;
}

// The number in an answer line "ok VERB N" (0 when it is not one).
uint64_t answered_count(const std::string& line) {
  std::istringstream in(line);
  std::string ok, verb;
  uint64_t n = 0;
  in >> ok >> verb >> n;
  return ok == "ok" ? n : 0;
}

// Nodes the coordinator holds in each state, from `status` (cheap: polling `nodes`, one
// entry per node, cost the coordinator more than the fleet did at a thousand nodes).
std::map<std::string, uint64_t> node_states(up::local_cluster& c) {
  std::map<std::string, uint64_t> out;
  auto s = c.console("status", {}, {}, 10000);
  if (!s || !s->contains("nodes_by_state")) return out;
  for (auto& [state, n] : (*s)["nodes_by_state"].items()) out[state] = n.get<uint64_t>();
  return out;
}

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// One fault phase: sends `command` to every host, then watches the coordinator's view until
// the phase's time is over. `settled_state`: the state every victim reaches in it ("dead",
// "drained"); the phase records when the coordinator held `before + victims` nodes in it.
json fault_phase(up::local_cluster& c, std::vector<host_process>& hosts, const std::string& command,
                 const std::string& settled_state, double fault_s, double* t_fault_ms,
                 double* t_end_ms) {
  const uint64_t before = node_states(c)[settled_state];
  *t_fault_ms = fleet_now_ms();
  for (auto& h : hosts) h.send(command);
  uint64_t victims = 0;
  for (auto& h : hosts) victims += answered_count(h.read_answer(10000));
  const double sent_ms = fleet_now_ms();
  json settled = nullptr;
  std::map<std::string, uint64_t> states;
  while (fleet_now_ms() - *t_fault_ms < fault_s * 1000.0) {
    states = node_states(c);
    if (settled.is_null() && states[settled_state] >= before + victims)
      settled = (fleet_now_ms() - *t_fault_ms) / 1000.0;
    sleep_s(0.1);
  }
  *t_end_ms = fleet_now_ms();
  return {{"command", command},
          {"victims", victims},
          {"command_delivered_s", (sent_ms - *t_fault_ms) / 1000.0},
          {"all_" + settled_state + "_s", settled},
          {"coordinator_node_states_at_end", states},
          {"observed_every_s", 0.1}};
}

// Throughput windows after a fault: two unit times (at least 1 s), so the fleet's waves
// (fleet_analysis.h) average out.
double recovery_window_ms(const fleet_args& a) { return std::max(1000.0, 2.0 * double(a.unit_ms)); }

json run_fleet(const fleet_args& a, const std::string& dir) {
  json out{{"benchmark", "fleet"}};
  const auto overrides = fleet_overrides(a, dir);
  out["config"] = {{"nodes", a.nodes},
                   {"units_per_iteration", a.units_per_iteration},
                   {"hosts", a.hosts},
                   {"unit_ms", a.unit_ms},
                   {"lease_batch", a.lease_batch},
                   {"samples_per_unit", a.samples_per_group},
                   {"heartbeat_ms", a.heartbeat_ms},
                   {"warmup_s", a.warmup_s},
                   {"measure_s", a.measure_s},
                   {"fault_s", a.fault_s},
                   {"fraction", a.fraction},
                   {"notice_ms", a.notice_ms},
                   {"recovery_ratio", a.recovery_ratio},
                   {"machine_cpus", std::thread::hardware_concurrency()},
                   {"overrides", overrides}};
  out["load_average_start"] = host_load_average();

  up::cluster_options co;
  co.binary = self_executable();
  co.overrides = overrides;
  co.log_dir = dir + "/logs";
  co.nodes = {{"buffer", "buffer-0", {}}, {"buffer", "buffer-1", {}}, {"trainer", "trainer", {}}};
  auto cluster = need(up::local_cluster::start(co), "cluster (coordinator, 2 shards, trainer)");
  need(cluster->wait_status([](const json& s) { return s.value("nodes_alive", 0) >= 3; }, 30000),
       "shards and trainer joined");
  const pid_t coord_pid = cluster->pid_of("coordinator");
  const proc_usage before_fleet = usage_of(coord_pid);

  // The fleet: hosts share the nodes evenly.
  std::vector<host_process> hosts;
  const double t_start_ms = fleet_now_ms();
  for (uint32_t h = 0; h < a.hosts; ++h) {
    uint32_t n = a.nodes / a.hosts + (h < a.nodes % a.hosts ? 1 : 0);
    hosts.push_back(spawn_host(a, cluster->coordinator_join(), h, n, overrides, dir));
  }
  auto stop_hosts = [&] {
    for (auto& h : hosts) h.send("stop");
    for (auto& h : hosts) {
      (void)h.read_answer(30000);
      h.end();  // gone already after "stopped"; a stuck one goes now
    }
  };
  for (auto& h : hosts)
    if (h.read_answer(60000).rfind("ok started", 0) != 0) {
      stop_hosts();
      throw std::runtime_error("a simulated host did not start (see its log in the run dir)");
    }
  auto all_in = cluster->wait_status(
      [&](const json& s) { return s.value("nodes_alive", 0u) >= 3 + a.nodes; }, 120000);
  if (!all_in) {
    stop_hosts();
    throw std::runtime_error("the fleet did not register: " + all_in.err().to_string());
  }
  out["registration_s"] = (fleet_now_ms() - t_start_ms) / 1000.0;

  sleep_s(a.warmup_s);
  const double t_m0 = fleet_now_ms();
  const proc_usage u0 = usage_of(coord_pid);
  const json load_measure = host_load_average();
  sleep_s(a.measure_s);
  const double t_m1 = fleet_now_ms();
  const proc_usage u1 = usage_of(coord_pid);

  json kill, notice;
  double t_kill = 0, t_kill_end = 0, t_notice = 0, t_notice_end = 0;
  if (!a.skip_faults) {
    std::ostringstream k, n;
    k << "kill " << a.fraction << " 1";
    kill = fault_phase(*cluster, hosts, k.str(), "dead", a.fault_s, &t_kill, &t_kill_end);
    n << "notice " << a.fraction << " " << a.notice_ms << " 1";
    notice = fault_phase(*cluster, hosts, n.str(), "drained", a.fault_s, &t_notice, &t_notice_end);
  }
  stop_hosts();
  const json load_end = host_load_average();
  auto status = cluster->console("status", {}, {}, 10000);
  (void)cluster->stop(20000);

  std::vector<json> records;
  for (auto& h : hosts) {
    std::ifstream f(h.record_file);
    auto j = json::parse(f, nullptr, false);
    if (j.is_object()) records.push_back(std::move(j));
  }
  out["hosts_reporting"] = records.size();
  const fleet_merged m = merge_fleet_records(records);

  const double measured_s = (t_m1 - t_m0) / 1000.0;
  const double baseline = units_per_s_in(m, t_m0, t_m1);
  out["steady"] = {
      {"window_s", measured_s},
      {"lease_rtt", lease_latency_in(m, t_m0, t_m1)},
      {"report_rtt", report_latency_in(m, t_m0, t_m1)},
      {"units_per_s", baseline},
      {"coordinator_cpu_cores", (u1.cpu_s - u0.cpu_s) / measured_s},
      {"coordinator_cpu_ms_per_s_per_node",
       (u1.cpu_s - u0.cpu_s) * 1000.0 / measured_s / double(std::max<uint32_t>(1, a.nodes))},
      {"coordinator_rss_bytes", u1.rss_bytes},
      {"coordinator_rss_bytes_before_fleet", before_fleet.rss_bytes},
      {"coordinator_rss_bytes_per_node",
       (double(u1.rss_bytes) - double(before_fleet.rss_bytes)) / double(a.nodes)},
      {"load_average", load_measure}};
  out["lease_rtt_whole_run"] = lease_latency_in(m, 0, 1e300);
  out["report_rtt_whole_run"] = report_latency_in(m, 0, 1e300);
  if (!a.skip_faults) {
    std::vector<std::vector<double>> killed_leases;
    for (const auto& o : m.orphans)
      if (o[0] >= t_kill && o[0] < t_kill_end) killed_leases.push_back(o);
    kill["leases_held_by_victims"] = killed_leases.size();
    kill["leased_again"] = time_to_lease_again(m, killed_leases, t_kill, t_kill_end);
    kill["throughput"] = throughput_recovery(m, t_kill, t_kill_end, baseline, a.recovery_ratio,
                                             recovery_window_ms(a));
    std::vector<std::vector<double>> given_back;
    std::vector<double> pending_s;
    for (const auto& r : m.returned)
      if (r[1] >= t_notice) {
        given_back.push_back({r[1], r[2], r[3]});
        pending_s.push_back((r[1] - t_notice) / 1000.0);
      }
    std::sort(pending_s.begin(), pending_s.end());
    uint64_t finished = 0, returned = 0;
    std::vector<double> drain_s;
    for (const auto& d : m.drains) {
      finished += d.value("units_finished", uint64_t{0});
      returned += d.value("units_returned", uint64_t{0});
      drain_s.push_back(d.value("drain_ms", 0.0) / 1000.0);
    }
    std::sort(drain_s.begin(), drain_s.end());
    notice["drains_recorded"] = m.drains.size();
    notice["units_finished_by_victims"] = finished;
    notice["units_given_back"] = returned;
    notice["drain_s"] = drain_s.empty() ? json(nullptr)
                                        : json{{"p50", nearest_rank_percentile(drain_s, 50)},
                                               {"max", drain_s.back()}};
    notice["given_back_pending_s"] = pending_s.empty()
                                         ? json(nullptr)
                                         : json{{"n", pending_s.size()},
                                                {"p50", nearest_rank_percentile(pending_s, 50)},
                                                {"max", pending_s.back()}};
    notice["leased_again"] = time_to_lease_again(m, given_back, t_notice, t_notice_end);
    notice["throughput"] = throughput_recovery(m, t_notice, t_notice_end, baseline,
                                               a.recovery_ratio, recovery_window_ms(a));
    out["kill"] = kill;
    out["notice"] = notice;
  }
  out["fleet"] = {{"registered", m.registered},     {"register_failed", m.register_failed},
                  {"heartbeats", m.heartbeats},     {"heartbeat_errors", m.heartbeat_errors},
                  {"samples_sent", m.samples_sent}, {"lease_refusals", m.refusals},
                  {"unit_failures", m.failures}};
  if (status) {
    out["books"] = {{"accounting", (*status)["accounting"]},
                    {"invariant_ok", (*status)["invariant_ok"]},
                    {"invariant_violations", (*status)["invariant_violations"]},
                    {"policy_version", (*status)["policy_version"]},
                    {"units", (*status)["units"]}};
  } else {
    out["books"] = {{"error", status.err().to_string()}};
  }
  // The coordinator's tick at this run's ledger size and at the sizes of longer runs.
  std::vector<uint64_t> sizes = a.tick_cost_units;
  if (status) sizes.insert(sizes.begin(), (*status).value("units", uint64_t{0}));
  json ticks = json::array();
  for (uint64_t n : sizes)
    if (n > 0) ticks.push_back(ledger_tick_cost(n, a.nodes, 5));
  out["coordinator_tick_scans"] = ticks;
  out["load_average_end"] = load_end;
  out["provenance"] = collect_provenance();
  return out;
}

void print_text(const json& r) {
  const auto& s = r["steady"];
  const auto& l = s["lease_rtt"];
  std::printf("fleet: %u nodes in %u hosts, unit %ld ms, K=%u\n",
              r["config"]["nodes"].get<uint32_t>(), r["config"]["hosts"].get<uint32_t>(),
              r["config"]["unit_ms"].get<long>(), r["config"]["lease_batch"].get<uint32_t>());
  std::printf(
      "steady: lease rtt p50 %.2f ms p99 %.2f ms (n=%lu), %.0f units/s, coordinator %.2f "
      "cores, RSS %.1f MiB (%.1f KiB/node)\n",
      l.value("p50_us", 0.0) / 1e3, l.value("p99_us", 0.0) / 1e3, l.value("n", 0ul),
      s["units_per_s"].get<double>(), s["coordinator_cpu_cores"].get<double>(),
      s["coordinator_rss_bytes"].get<double>() / 1048576.0,
      s["coordinator_rss_bytes_per_node"].get<double>() / 1024.0);
  auto secs = [](const json& v) { return v.is_number() ? v.get<double>() : -1.0; };
  if (r.contains("kill")) {
    const auto& k = r["kill"];
    std::printf(
        "kill %lu: all dead (their leases pending again) after %.2f s; units/s back at "
        "%.0f%% after %.1f s (-1: not within the phase)\n",
        k.value("victims", 0ul), secs(k["all_dead_s"]),
        100 * k["throughput"].value("ratio_required", 0.0),
        secs(k["throughput"].contains("recovered_s") ? k["throughput"]["recovered_s"] : json()));
  }
  if (r.contains("notice")) {
    const auto& n = r["notice"];
    std::printf("notice %lu: all drained after %.2f s; %lu units finished, %lu given back\n",
                n.value("victims", 0ul), secs(n["all_drained_s"]),
                n.value("units_finished_by_victims", 0ul), n.value("units_given_back", 0ul));
  }
  json acct = json::object();
  if (r["books"].contains("accounting")) acct = r["books"]["accounting"];
  std::printf("books: lost %lu, duplicated %lu, invariant %s, committed %lu, trained %lu\n",
              acct.value("lost", 0ul), acct.value("duplicated", 0ul),
              r["books"].value("invariant_ok", false) ? "ok" : "BROKEN",
              acct.value("committed", 0ul), acct.value("trained", 0ul));
}

}  // namespace

void add_fleet_bench_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "fleet", "control plane at fleet scale: N simulated rollout nodes against one coordinator");
  static fleet_args a;
  cmd->add_flag("--json", a.json_out, "print JSON only");
  cmd->add_option("--nodes", a.nodes, "simulated rollout nodes")->check(CLI::Range(1, 100000));
  cmd->add_option("--hosts", a.hosts, "processes the simulated nodes are multiplexed into")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--unit-ms", a.unit_ms, "simulated generation time of one work unit")
      ->check(CLI::Range(1, 600000));
  cmd->add_option("--lease-batch", a.lease_batch, "units per lease request (actors.lease_batch)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--samples-per-unit", a.samples_per_group,
                  "samples per unit (one prompt group of ledger.group_size)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--heartbeat-ms", a.heartbeat_ms, "node.heartbeat_interval_ms of every node")
      ->check(CLI::Range(50, 60000));
  cmd->add_option("--warmup", a.warmup_s, "seconds after every node registered, not measured")
      ->check(CLI::Range(0.0, 600.0));
  cmd->add_option("--measure", a.measure_s, "seconds of the steady measurement")
      ->check(CLI::Range(0.5, 3600.0));
  cmd->add_option("--fault", a.fault_s, "seconds each fault phase is watched (> 2 unit times)")
      ->check(CLI::Range(1.0, 600.0));
  cmd->add_option("--fraction", a.fraction, "fraction of the nodes killed / noticed at once")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--notice-ms", a.notice_ms, "Spot notice: milliseconds to the deadline")
      ->check(CLI::Range(0, 600000));
  cmd->add_option("--recovery-ratio", a.recovery_ratio,
                  "throughput counts as back at this fraction of the steady units/s")
      ->check(CLI::Range(0.1, 1.0));
  cmd->add_flag("--no-faults", a.skip_faults, "steady phase only");
  cmd->add_option("--snapshot-every", a.snapshot_every,
                  "ledger.snapshot_every of the coordinator (0: the config's)")
      ->check(CLI::Range(0, 100000000));
  cmd->add_option("--units-per-iteration", a.units_per_iteration,
                  "units the coordinator opens per iteration (0: 10 per node); the ledger holds "
                  "every unit a run created, so this also sets its size from the start")
      ->check(CLI::Range(0, 1000000));
  cmd->add_option("--run-dir", a.run_dir, "keep the nodes' logs and records here");
  cmd->add_option("--tick-cost-units", a.tick_cost_units,
                  "ledger sizes (units) at which the coordinator tick's scans are also timed")
      ->delimiter(',');
  cmd->add_option("--sim-join", a.sim_join, "internal: run as a simulated host")->group("");
  cmd->add_option("--sim-out", a.sim_out, "internal")->group("");
  cmd->add_option("--sim-nodes", a.sim_nodes, "internal")->group("");
  cmd->add_option("--sim-index", a.sim_index, "internal")->group("");
  cmd->add_option("--sim-set", a.sim_overrides, "internal")->group("");
  cmd->callback([] {
    if (!a.sim_join.empty()) {
      sim_host_args h;
      h.join = a.sim_join;
      h.nodes = a.sim_nodes;
      h.index = a.sim_index;
      h.out = a.sim_out;
      h.overrides = a.sim_overrides;
      h.node.unit_ms = a.unit_ms;
      h.node.lease_batch = a.lease_batch;
      int rc = run_sim_host(h);
      if (rc) throw CLI::RuntimeError(rc);
      return;
    }
    run_bench_command("fleet", [] {
      std::unique_ptr<temp_dir> tmp;
      std::string dir = a.run_dir;
      if (dir.empty()) {
        tmp = need(temp_dir::create("bench-fleet"), "run directory");
        dir = tmp->path();
      } else if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
        throw std::runtime_error("cannot create --run-dir " + dir);
      }
      json out = run_fleet(a, dir);
      if (a.json_out)
        std::cout << out.dump(2) << "\n";
      else
        print_text(out);
    });
  });
}

}  // namespace moerl::bench
