#include "bench/control/control_bench.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include <CLI/CLI.hpp>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/atoms.h"
#include "actors/caf_setup.h"
#include "actors/coordinator.h"
#include "actors/node_identity.h"
#include "bench/control/lease_client.h"
#include "bench/support.h"
#include "common/config.h"
#include "common/temp_dir.h"
#include "ledger/clock.h"
#include "messages/control.h"
#include "provenance/provenance.h"
#include "up/local_cluster.h"

namespace moerl::bench {
namespace {

using namespace moerl::actors;
using nlohmann::json;

struct bench_args {
  bool json_out = false;
  int requests = 3000;
  int nodes = 8;
  int window = 16;       // K=1 lease requests in flight per leaser process
  int batch_window = 4;  // K=batch lease requests in flight per leaser process
  uint32_t batch = 256;
  double duration_s = 3.0;
  int repeat = 3;  // throughput runs per K, interleaved (K=1, K=batch, K=1, ...)
  bool fsync = false;
  std::string leaser;  // internal: run as one leaser process against HOST:PORT
  uint32_t leaser_k = 1;
};

const char* const kLeasedUnit =
    "one work unit leased through the coordinator's ledger and handed back unstarted: a journaled "
    "`leased` record (own fencing attempt and deadline) plus an attempt_opened event delivered to "
    "the shard's stand-in actor, then a journaled `ended(returned)` record plus an attempt_fenced "
    "event; no samples are generated and nothing commits. K=1 uses lease + report(returned) per "
    "unit; K=batch asks for up to K units per request and gives them all back in one message.";

json load_average() { return host_load_average(); }

std::string heartbeat_bytes(const std::string& id, const std::string& role,
                            const std::string& endpoint) {
  messages::heartbeat hb;
  hb.node = id;
  hb.role = role;
  hb.name = role + "-" + id.substr(0, 6);
  hb.pid = static_cast<uint32_t>(::getpid());
  hb.state = "running";
  hb.endpoint = endpoint;
  return messages::encode(hb);
}

// An actor that stands in for a buffer node's agent: it swallows the ledger events.
// Its default handler answers with an empty message: caf::drop would answer the
// coordinator's messages with an unexpected_message error, which ends the coordinator.
caf::behavior sink(caf::event_based_actor* self) {
  self->set_default_handler(
      [](caf::scheduled_actor*, caf::message_view&) -> caf::result<caf::message> {
        return caf::message{};
      });
  return {[](shutdown_atom) {}};
}

void register_node(caf::scoped_actor& self, const caf::actor& coord, const std::string& id,
                   const std::string& role, const std::string& endpoint, const caf::actor& agent) {
  self->request(coord, std::chrono::seconds(5), register_atom::value,
                heartbeat_bytes(id, role, endpoint), agent)
      .receive([](std::string&) {}, [](caf::error&) {});
}

// Registers a stand-in buffer shard and a rollout node; returns the rollout node's id.
std::string join(caf::scoped_actor& self, const caf::actor& coord, const caf::actor& agent) {
  auto shard_id = make_node_id(), rollout_id = make_node_id();
  register_node(self, coord, shard_id, "buffer", "tcp://127.0.0.1:9", agent);
  register_node(self, coord, rollout_id, "rollout", "", agent);
  return rollout_id;
}

// The coordinator's config. The unit pool is large enough that every lease request of the
// throughput run can be granted in full (2x the units in flight at most).
std::vector<std::string> bench_overrides(const bench_args& a, const std::string& dir) {
  uint64_t pool = std::max<uint64_t>(
      1024, 2ull * a.nodes * std::max<uint64_t>(a.window, uint64_t(a.batch_window) * a.batch));
  return {"store.url=" + dir, std::string("store.local_fsync=") + (a.fsync ? "true" : "false"),
          "actors.iterations=1", "actors.units_per_iteration=" + std::to_string(pool),
          // The stand-in leasers run no job: the synthetic job's kind keeps the GRPO job's
          // shape checks (job.rollout_ep_ranks <= ledger.group_size) out of a pure
          // control-plane measurement.
          "job.kind=modpow", "actors.groups_per_unit=1", "ledger.group_size=1",
          "ledger.lease_timeout_ms=60000", "actors.lease_batch=" + std::to_string(a.batch),
          "buffer.capacity_samples=1099511627776", "node.heartbeat_interval_ms=500",
          "node.connection_timeout_ms=5000", "log.level=warn", "ledger.snapshot_every=100000",
          // The bench's stand-in nodes send no heartbeats; keep the coordinator from
          // declaring them dead mid-measurement.
          "actors.heartbeat_misses=1000000"};
}

// Round trips of K=1 and K=batch lease requests, one request in flight.
json rtt_pair(caf::scoped_actor& self, const caf::actor& coord, const std::string& worker,
              const bench_args& a) {
  json out = json::array();
  for (uint32_t k : {1u, a.batch}) {
    uint64_t units = 0;
    std::string refusal;
    auto us = timed_lease_round_trips(self, coord, worker, k, a.requests, units, refusal);
    json r{{"k", k}, {"lease_rtt", latency_summary_us(us)}, {"units_granted", units}};
    if (!us.empty()) {
      r["units_per_reply"] = double(units) / us.size();
      auto p = latency_summary_us(us);
      r["p50_us_per_unit"] = p["p50_us"].get<double>() / (double(units) / us.size());
    }
    if (!refusal.empty()) r["first_refusal"] = refusal;
    out.push_back(r);
  }
  return out;
}

json in_process(const bench_args& a, const std::string& dir) {
  auto cfg = need(config::load("", bench_overrides(a, dir)), "coordinator config");
  auto lo = need(ledger::ledger_options::from_config(cfg), "ledger options");
  static ledger::steady_clock_source clock;
  auto led = need(ledger::work_ledger::open(lo, clock, nullptr), "in-memory ledger");
  auto co = need(coordinator_options::from_config(cfg), "coordinator options");
  caf::actor_system_config sc;
  caf::actor_system sys{sc};
  auto coord =
      spawn_coordinator(sys, std::make_unique<coordinator_core>(co, std::move(led), clock));
  auto agent = sys.spawn(sink);
  caf::scoped_actor self{sys};
  self->monitor(coord);
  auto id = join(self, coord, agent);
  json r{{"requester", "blocking (scoped_actor), one request at a time"},
         {"transport", "CAF local mailboxes (one process)"},
         {"journal", "none: in-memory ledger (sync() is a no-op)"},
         {"runs", rtt_pair(self, coord, id + "/0", a)}};
  std::string down;
  self->receive([&](caf::down_msg& d) { down = sys.render(d.reason); },
                caf::after(std::chrono::milliseconds(0)) >> [] {});
  if (!down.empty()) r["coordinator_down"] = down;
  caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(agent, caf::exit_reason::user_shutdown);
  return r;
}

pid_t spawn_self(const std::vector<std::string>& args, const std::string& log) {
  char exe[4096];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = 0;
  pid_t pid = ::fork();
  if (pid == 0) {
    FILE* f = std::freopen(log.c_str(), "a", stdout);
    (void)f;
    ::dup2(1, 2);
    std::vector<char*> argv{exe};
    for (auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    ::execv(exe, argv.data());
    ::_exit(127);
  }
  return pid;
}

// One leaser process (one "rollout node"): `window` lease cycles of K units in flight for
// `duration_s`; prints the units it was granted.
int run_leaser(const bench_args& a) {
  auto hp = parse_host_port(a.leaser);
  if (!hp) {
    std::cerr << hp.err().to_string() << "\n";
    return 1;
  }
  auto cfg = config::load("", {});
  auto cp = control_plane_options::from_config(*cfg);
  node_caf_config ccfg(*cp);
  caf::actor_system sys{ccfg};
  auto coord = connect_with_retry(sys, *cp, hp->first, hp->second, 10000);
  if (!coord) {
    std::cerr << coord.err().to_string() << "\n";
    return 1;
  }
  auto id = make_node_id();
  caf::scoped_actor self{sys};
  auto agent = sys.spawn(sink);
  register_node(self, *coord, id, "rollout", "", agent);
  auto units = std::make_shared<std::atomic<uint64_t>>(0);
  auto grants = std::make_shared<std::atomic<uint64_t>>(0);
  auto until = bench_clock::now() + std::chrono::duration_cast<bench_clock::duration>(
                                        std::chrono::duration<double>(a.duration_s));
  auto driver = spawn_lease_driver(sys, *coord, id + "/0", a.leaser_k, a.window,
                                   until.time_since_epoch().count(), [=](uint64_t n) {
                                     *units += n;
                                     ++*grants;
                                   });
  std::this_thread::sleep_until(until +
                                std::chrono::milliseconds(500));  // let the last replies land
  std::printf("{\"units\": %lu, \"grants\": %lu}\n", units->load(), grants->load());
  std::fflush(stdout);
  caf::anon_send_exit(driver, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(agent, caf::exit_reason::user_shutdown);
  std::_Exit(0);  // skip the actor system's orderly teardown of the remote connection
}

// `nodes` leaser processes against the coordinator at `join_addr`, each asking for K units
// per request; the sum of the units they were granted per second.
json throughput(const bench_args& a, const std::string& dir, const std::string& join_addr,
                uint32_t k) {
  const int window = k == 1 ? a.window : a.batch_window;
  std::vector<pid_t> kids;
  // Each run its own log files: the reader sums every report line it finds, and a file
  // shared with an earlier repeat would count that repeat's units again.
  static int run_no = 0;
  auto tag = "leaser-run" + std::to_string(++run_no) + "-k" + std::to_string(k) + "-";
  json load_before = load_average();
  for (int n = 0; n < a.nodes; ++n)
    kids.push_back(
        spawn_self({"bench", "control", "--leaser", join_addr, "--leaser-k", std::to_string(k),
                    "--duration", std::to_string(a.duration_s), "--window", std::to_string(window)},
                   dir + "/" + tag + std::to_string(n) + ".log"));
  uint64_t units = 0, grants = 0;
  int reported = 0;
  for (size_t n = 0; n < kids.size(); ++n) {
    ::waitpid(kids[n], nullptr, 0);
    std::ifstream f(dir + "/" + tag + std::to_string(n) + ".log");
    for (std::string line; std::getline(f, line);) {
      auto j = json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("units")) {
        units += j["units"].get<uint64_t>();
        grants += j["grants"].get<uint64_t>();
        ++reported;
      }
    }
  }
  double per_s = units / a.duration_s;
  json r{{"k", k},
         {"rollout_processes", a.nodes},
         {"processes_reporting", reported},
         {"window_per_process", window},
         {"units_in_flight_max", uint64_t(a.nodes) * window * k},
         {"duration_s", a.duration_s},
         {"units", units},
         {"lease_requests_granted", grants},
         {"units_per_s", per_s},
         {"x_ray_async_calls", per_s / 8700.0},
         {"load_average_before", load_before},
         {"load_average_after", load_average()}};
  return r;
}

// The repeats of one K: the median is the figure (the VM is shared and noisy), with the
// spread and every run kept.
json summarize(const std::vector<json>& reps) {
  std::vector<double> v;
  for (const auto& r : reps) v.push_back(r.value("units_per_s", 0.0));
  std::sort(v.begin(), v.end());
  double median = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  const json& first = reps.front();
  return {{"k", first["k"]},
          {"rollout_processes", first["rollout_processes"]},
          {"window_per_process", first["window_per_process"]},
          {"units_in_flight_max", first["units_in_flight_max"]},
          {"duration_s", first["duration_s"]},
          {"repeats", reps.size()},
          {"units_per_s", median},
          {"units_per_s_min", v.front()},
          {"units_per_s_max", v.back()},
          {"x_ray_async_calls", median / 8700.0},
          {"runs", reps}};
}

json cross_process(const bench_args& a, const std::string& dir) {
  auto port = up::free_tcp_port();
  auto console_port = up::free_tcp_port();
  if (!port || !console_port) return json{{"error", "no free TCP port"}};
  std::string join_addr = "127.0.0.1:" + std::to_string(*port);
  std::vector<std::string> args{"node", "--role", "coordinator", "--join", join_addr};
  for (auto& kv : bench_overrides(a, dir)) {
    args.push_back("--set");
    args.push_back(kv);
  }
  args.push_back("--set");
  args.push_back("console.address=tcp://127.0.0.1:" + std::to_string(*console_port));
  pid_t coord_pid = spawn_self(args, dir + "/coordinator.log");
  json out;
  {
    auto cfg = config::load("", {});
    auto cp = control_plane_options::from_config(*cfg);
    node_caf_config ccfg(*cp);
    caf::actor_system sys{ccfg};
    auto coord = connect_with_retry(sys, *cp, "127.0.0.1", *port, 15000);
    if (!coord) {
      ::kill(coord_pid, SIGKILL);
      ::waitpid(coord_pid, nullptr, 0);
      return json{{"error", coord.err().to_string()}};
    }
    auto agent = sys.spawn(sink);
    caf::scoped_actor self{sys};
    auto id = join(self, *coord, agent);
    out["lease_rtt"] = {{"requester", "blocking (scoped_actor), one request at a time"},
                        {"runs", rtt_pair(self, *coord, id + "/0", a)}};
    std::vector<json> k1, kb;
    for (int r = 0; r < a.repeat; ++r) {  // interleaved, so load drift hits both alike
      k1.push_back(throughput(a, dir, join_addr, 1));
      kb.push_back(throughput(a, dir, join_addr, a.batch));
    }
    out["leased_units_per_s"] = json::array({summarize(k1), summarize(kb)});
    caf::anon_send_exit(agent, caf::exit_reason::user_shutdown);
  }
  ::kill(coord_pid, SIGTERM);
  ::waitpid(coord_pid, nullptr, 0);
  return out;
}

json run_all(const bench_args& a, const std::string& dir) {
  json out{{"benchmark", "control"}, {"leased_unit", kLeasedUnit}};
  out["config"] = {{"requests", a.requests},
                   {"nodes", a.nodes},
                   {"window_k1", a.window},
                   {"window_batch", a.batch_window},
                   {"batch_k", a.batch},
                   {"duration_s", a.duration_s},
                   {"repeat", a.repeat},
                   {"machine_cpus", std::thread::hardware_concurrency()},
                   {"coordinator_overrides", bench_overrides(a, dir)}};
  out["transport"] =
      "in-process: CAF 0.17.6 local mailboxes; cross-process: CAF 0.17.6 middleman (BASP) over "
      "loopback "
      "TCP 127.0.0.1, no TLS; the coordinator is one actor in its own process (`moerl node --role "
      "coordinator`)";
  out["journal"] = {{"in_process", "off (in-memory ledger)"},
                    {"cross_process",
                     "on: every lease and hand-back journaled to the local object store before "
                     "it is answered, group commit (one sync per batch of waiting requests)"},
                    {"fsync", a.fsync}};
  out["load_average_start"] = load_average();
  out["lease_rtt_in_process"] = in_process(a, dir);
  auto cross = cross_process(a, dir);
  for (auto& [k, v] : cross.items()) out[k == "lease_rtt" ? "lease_rtt_cross_process" : k] = v;
  if (out.contains("leased_units_per_s") && out["leased_units_per_s"].size() == 2) {
    double k1 = out["leased_units_per_s"][0].value("units_per_s", 0.0);
    double kb = out["leased_units_per_s"][1].value("units_per_s", 0.0);
    out["ratios"] = {{"of", "medians over the repeats"},
                     {"batch_over_k1_units_per_s", k1 > 0 ? kb / k1 : 0.0},
                     {"k1_over_ray_async_8700", k1 / 8700.0},
                     {"batch_over_ray_async_8700", kb / 8700.0},
                     {"target_ratio_over_ray_async", 10.0},
                     {"ray_reference",
                      "Ray's published 1:1 actor calls/s: ~2,000 sync, ~8,700 async (other "
                      "hardware; a call is not a journaled lease)"}};
  }
  out["load_average_end"] = load_average();
  out["provenance"] = collect_provenance();
  return out;
}

void print_text(const json& out, const bench_args& a) {
  auto rtt = [&](const char* where, const json& runs) {
    for (auto& r : runs) {
      auto& p = r["lease_rtt"];
      std::printf("lease rtt %-14s K=%-4u p50 %8.1f us  p99 %8.1f us  units/reply %.1f  (n=%lu)\n",
                  where, r["k"].get<uint32_t>(), p.value("p50_us", 0.0), p.value("p99_us", 0.0),
                  r.value("units_per_reply", 0.0), p.value("n", 0ul));
    }
  };
  rtt("in-process", out["lease_rtt_in_process"]["runs"]);
  if (out.contains("lease_rtt_cross_process"))
    rtt("cross-process", out["lease_rtt_cross_process"]["runs"]);
  if (out.contains("leased_units_per_s"))
    for (auto& r : out["leased_units_per_s"])
      std::printf(
          "leased units/s K=%-4u %d procs x window %d: median %.0f (min %.0f, max %.0f, %d runs)  "
          "%.2fx Ray async 8,700\n",
          r["k"].get<uint32_t>(), a.nodes, r.value("window_per_process", 0),
          r.value("units_per_s", 0.0), r.value("units_per_s_min", 0.0),
          r.value("units_per_s_max", 0.0), a.repeat, r.value("x_ray_async_calls", 0.0));
  if (out.contains("error")) std::printf("error: %s\n", out["error"].dump().c_str());
}

}  // namespace

void add_control_bench_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "control", "control plane: lease round trips and leased units/s, K=1 and K=batch");
  static bench_args a;
  cmd->add_flag("--json", a.json_out, "print JSON only");
  cmd->add_option("--requests", a.requests, "sequential lease round trips per measurement")
      ->check(CLI::Range(1, 10000000));
  cmd->add_option("--nodes", a.nodes, "leaser processes (rollout nodes) for the throughput runs")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--window", a.window, "K=1 lease requests in flight per leaser process")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--batch-window", a.batch_window,
                  "K=batch lease requests in flight per leaser process")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--batch", a.batch,
                  "K of the batched run: units per lease request (actors.lease_batch)")
      ->check(CLI::Range(2, 4096));
  cmd->add_option("--duration", a.duration_s, "seconds of each throughput run")
      ->check(CLI::Range(0.1, 600.0));
  cmd->add_option("--repeat", a.repeat, "throughput runs per K (the median is reported)")
      ->check(CLI::Range(1, 100));
  cmd->add_flag("--fsync", a.fsync, "journal with fsync (store.local_fsync=true)");
  cmd->add_option("--leaser", a.leaser, "internal: run as one leaser process against HOST:PORT")
      ->group("");
  cmd->add_option("--leaser-k", a.leaser_k, "internal: units per lease request of a leaser process")
      ->group("");
  cmd->callback([] {
    if (!a.leaser.empty()) {
      int rc = run_leaser(a);
      if (rc) throw CLI::RuntimeError(rc);
      return;
    }
    run_bench_command("control", [] {
      // The run's journal and leaser logs, removed however the run ends.
      auto dir = temp_dir::create("bench-control");
      if (!dir) throw std::runtime_error(dir.err().to_string());
      json out = run_all(a, (*dir)->path());
      if (a.json_out)
        std::cout << out.dump(2) << "\n";
      else
        print_text(out, a);
      // A run whose cross-process part could not start is a failed benchmark, not a result:
      // the JSON above says why, and the exit status tells scripts and CI.
      if (out.contains("error")) throw std::runtime_error("did not run: " + out["error"].dump());
    });
  });
}

}  // namespace moerl::bench
