#include "bench/control/control_bench.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <CLI/CLI.hpp>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/atoms.h"
#include "actors/caf_setup.h"
#include "actors/coordinator.h"
#include "actors/ledger/clock.h"
#include "actors/local_cluster.h"
#include "actors/node_identity.h"
#include "common/config.h"
#include "messages/control.h"
#include "messages/work.h"
#include "provenance/provenance.h"

namespace moerl::bench {
namespace {

using namespace moerl::actors;
using nlohmann::json;
using clk = std::chrono::steady_clock;

struct bench_args {
  bool json_out = false;
  int requests = 3000;
  int nodes = 8;
  int window = 16;
  double duration_s = 3.0;
  std::string leaser;  // internal: run as one leaser process against HOST:PORT
};

std::string g_first_error;  // the first refusal a lease request got, for the JSON

json percentiles(std::vector<double> us) {
  if (us.empty()) return json::object();
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[std::min(us.size() - 1, static_cast<size_t>(q * us.size()))]; };
  double sum = 0;
  for (double v : us) sum += v;
  return {{"n", us.size()}, {"p50_us", at(0.5)}, {"p99_us", at(0.99)}, {"mean_us", sum / us.size()}, {"max_us", us.back()}};
}

std::string heartbeat_bytes(const std::string& id, const std::string& role, const std::string& endpoint) {
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
  self->set_default_handler([](caf::scheduled_actor*, caf::message_view&) -> caf::result<caf::message> {
    return caf::message{};
  });
  return {[](shutdown_atom) {}};
}

// Registers a fake buffer shard and a rollout node; returns the rollout node's id.
std::string join(caf::scoped_actor& self, const caf::actor& coord, const caf::actor& agent) {
  auto shard_id = make_node_id(), rollout_id = make_node_id();
  for (auto [id, role, ep] : {std::tuple<std::string, std::string, std::string>{shard_id, "buffer", "tcp://127.0.0.1:9"},
                              {rollout_id, "rollout", ""}})
    self->request(coord, std::chrono::seconds(5), register_atom::value, heartbeat_bytes(id, role, ep), agent)
        .receive([](std::string&) {}, [](caf::error&) {});
  return rollout_id;
}

// Sequential lease round trips from a blocking requester; each lease is handed back
// (untimed) so the queue never runs dry.
std::vector<double> lease_rtts(caf::scoped_actor& self, const caf::actor& coord, const std::string& worker, int n) {
  std::vector<double> us;
  messages::lease_request req;
  req.worker = worker;
  auto bytes = messages::encode(req);
  int timeouts = 0;
  for (int i = 0; i < n && timeouts < 3; ++i) {
    std::string reply;
    auto t0 = clk::now();
    self->request(coord, std::chrono::seconds(2), lease_atom::value, bytes)
        .receive([&](std::string& r) { reply = std::move(r); },
                 [&](caf::error& e) {
                   ++timeouts;
                   if (g_first_error.empty()) g_first_error = self->system().render(e);
                 });
    auto t1 = clk::now();
    auto l = messages::decode<messages::lease>(reply);
    if (!l) {  // no unit pending right now (or no reply: counted, 3 end the run)
      auto e = messages::decode<messages::wire_error>(reply);
      if (e && g_first_error.empty()) g_first_error = e->value.to_string();
      continue;
    }
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    messages::unit_report rep;
    rep.unit_id = l->unit.id;
    rep.attempt = l->attempt;
    rep.worker = worker;
    rep.status = messages::unit_status::returned;
    self->request(coord, std::chrono::seconds(5), report_atom::value, messages::encode(rep))
        .receive([](std::string&) {}, [](caf::error&) {});
  }
  return us;
}

std::vector<std::string> bench_overrides(const std::string& dir) {
  return {"store.url=" + dir, "store.local_fsync=false", "actors.iterations=1", "actors.units_per_iteration=1024",
          "actors.groups_per_unit=1", "ledger.group_size=1", "ledger.lease_timeout_ms=60000",
          "node.heartbeat_interval_ms=500", "node.connection_timeout_ms=5000", "log.level=warn",
          "ledger.snapshot_every=100000",
          // The bench's stand-in nodes send no heartbeats; keep the coordinator from
          // declaring them dead mid-measurement.
          "actors.heartbeat_misses=1000000"};
}

json in_process(const bench_args& a, const std::string& dir) {
  auto cfg = config::load("", bench_overrides(dir));
  auto lo = ledger::ledger_options::from_config(*cfg);
  static ledger::steady_clock_source clock;
  auto led = ledger::work_ledger::open(*lo, clock, nullptr);
  auto co = coordinator_options::from_config(*cfg);
  caf::actor_system_config sc;
  caf::actor_system sys{sc};
  auto coord = spawn_coordinator(sys, std::make_unique<coordinator_core>(*co, std::move(*led), clock));
  auto agent = sys.spawn(sink);
  caf::scoped_actor self{sys};
  self->monitor(coord);
  auto id = join(self, coord, agent);
  auto rtts = lease_rtts(self, coord, id + "/0", a.requests);
  std::string down;
  self->receive([&](caf::down_msg& d) { down = sys.render(d.reason); }, caf::after(std::chrono::milliseconds(0)) >> [] {});
  caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(agent, caf::exit_reason::user_shutdown);
  json r{{"requester", "blocking (scoped_actor), one request at a time"}, {"ledger_store", "none (memory)"},
         {"lease_rtt", percentiles(rtts)}};
  if (!g_first_error.empty()) r["first_refusal"] = g_first_error;
  if (!down.empty()) r["coordinator_down"] = down;
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

// One leaser process: W lease/give-back cycles in flight for `duration_s`; prints the count.
int run_leaser(const bench_args& a) {
  auto hp = parse_host_port(a.leaser);
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
  self->request(*coord, std::chrono::seconds(5), register_atom::value, heartbeat_bytes(id, "rollout", ""), agent)
      .receive([](std::string&) {}, [](caf::error&) {});
  auto counter = std::make_shared<std::atomic<uint64_t>>(0);
  auto until = clk::now() + std::chrono::duration_cast<clk::duration>(std::chrono::duration<double>(a.duration_s));
  auto driver = sys.spawn([=](caf::event_based_actor* s) -> caf::behavior {
    auto worker = id + "/0";
    auto next = std::make_shared<std::function<void()>>();
    *next = [=] {
      if (clk::now() >= until) return;
      messages::lease_request req;
      req.worker = worker;
      s->request(*coord, std::chrono::seconds(5), lease_atom::value, messages::encode(req))
          .then(
              [=](const std::string& r) {
                auto l = messages::decode<messages::lease>(r);
                if (!l) return (*next)();
                ++*counter;
                messages::unit_report rep;
                rep.unit_id = l->unit.id;
                rep.attempt = l->attempt;
                rep.worker = worker;
                rep.status = messages::unit_status::returned;
                s->request(*coord, std::chrono::seconds(5), report_atom::value, messages::encode(rep))
                    .then([=](const std::string&) { (*next)(); }, [=](caf::error&) { (*next)(); });
              },
              [=](caf::error&) { (*next)(); });
    };
    for (int w = 0; w < a.window; ++w) (*next)();
    return {[](shutdown_atom) {}};
  });
  std::this_thread::sleep_for(std::chrono::duration<double>(a.duration_s + 0.5));  // the measured interval
  std::printf("{\"leases\": %lu}\n", counter->load());
  std::fflush(stdout);
  caf::anon_send_exit(driver, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(agent, caf::exit_reason::user_shutdown);
  std::_Exit(0);  // skip the actor system's orderly teardown of the remote connection
}

json cross_process(const bench_args& a, const std::string& dir) {
  auto port = free_tcp_port();
  auto console_port = free_tcp_port();
  std::string join_addr = "127.0.0.1:" + std::to_string(*port);
  std::vector<std::string> args{"node", "--role", "coordinator", "--join", join_addr};
  for (auto& kv : bench_overrides(dir)) {
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
    auto rtts = lease_rtts(self, *coord, id + "/0", a.requests);
    out["lease_rtt_cross_process"] = {{"requester", "blocking (scoped_actor) over TCP loopback"},
                                      {"lease_rtt", percentiles(rtts)}};
    if (rtts.empty()) out["lease_rtt_cross_process"]["error"] = "no lease reply from the coordinator process";
    // Throughput: N leaser processes, each a window of requests in flight.
    std::vector<pid_t> kids;
    for (int k = 0; k < a.nodes; ++k)
      kids.push_back(spawn_self({"bench", "control", "--leaser", join_addr, "--duration", std::to_string(a.duration_s),
                                 "--window", std::to_string(a.window)},
                                dir + "/leaser-" + std::to_string(k) + ".log"));
    uint64_t total = 0;
    for (size_t k = 0; k < kids.size(); ++k) {
      ::waitpid(kids[k], nullptr, 0);
      std::FILE* f = std::fopen((dir + "/leaser-" + std::to_string(k) + ".log").c_str(), "r");
      char line[256];
      while (f && std::fgets(line, sizeof line, f)) {
        auto j = json::parse(line, nullptr, false);
        if (j.is_object() && j.contains("leases")) total += j["leases"].get<uint64_t>();
      }
      if (f) std::fclose(f);
    }
    double per_s = total / a.duration_s;
    out["leased_units_per_s"] = {{"rollout_processes", a.nodes},
                                 {"window_per_process", a.window},
                                 {"duration_s", a.duration_s},
                                 {"leases", total},
                                 {"units_per_s", per_s},
                                 {"each_lease_also_handed_back", true},
                                 {"ray_reference_calls_per_s", {{"sync", 2000}, {"async", 8700}}},
                                 {"x_ray_async", per_s / 8700.0}};
    caf::anon_send_exit(agent, caf::exit_reason::user_shutdown);
  }
  ::kill(coord_pid, SIGTERM);
  ::waitpid(coord_pid, nullptr, 0);
  return out;
}

}  // namespace

void add_control_bench_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("control", "control plane: lease round trips and leased units/s");
  static bench_args a;
  cmd->add_flag("--json", a.json_out, "print JSON only");
  cmd->add_option("--requests", a.requests, "sequential lease round trips per measurement");
  cmd->add_option("--nodes", a.nodes, "leaser processes for the throughput run");
  cmd->add_option("--window", a.window, "requests in flight per leaser process");
  cmd->add_option("--duration", a.duration_s, "seconds of the throughput run");
  cmd->add_option("--leaser", a.leaser, "internal: run as one leaser process against HOST:PORT")->group("");
  cmd->callback([] {
    if (!a.leaser.empty()) {
      int rc = run_leaser(a);
      if (rc) throw CLI::RuntimeError(rc);
      return;
    }
    char tmpl[] = "/tmp/moerl-bench-control-XXXXXX";
    std::string dir = ::mkdtemp(tmpl);
    json out{{"benchmark", "control"}};
    out["config"] = {{"requests", a.requests}, {"nodes", a.nodes}, {"window", a.window}, {"duration_s", a.duration_s},
                     {"store.local_fsync", false}, {"machine_cpus", std::thread::hardware_concurrency()}};
    out["lease_rtt_in_process"] = in_process(a, dir);
    auto cross = cross_process(a, dir);
    for (auto& [k, v] : cross.items()) out[k] = v;
    out["provenance"] = collect_provenance();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (a.json_out) {
      std::cout << out.dump(2) << "\n";
    } else {
      auto p = [&](const char* what, const json& r) {
        std::printf("%-28s p50 %8.1f us  p99 %8.1f us  (n=%lu)\n", what, r.value("p50_us", 0.0), r.value("p99_us", 0.0),
                    r.value("n", 0ul));
      };
      p("lease rtt in-process", out["lease_rtt_in_process"]["lease_rtt"]);
      p("lease rtt cross-process", out["lease_rtt_cross_process"]["lease_rtt"]);
      std::printf("leased units/s (%d procs): %.0f  (Ray async 1:1 calls/s: 8700)\n", a.nodes,
                  out["leased_units_per_s"].value("units_per_s", 0.0));
    }
  });
}

}  // namespace moerl::bench
