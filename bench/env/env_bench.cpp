#include "bench/env/env_bench.h"

#include <zmq.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "actors/cluster_ca.h"
#include "bench/support.h"
#include "common/config.h"
#include "common/temp_dir.h"
#include "provenance/provenance.h"
#include "sims/job_console.h"
#include "sims/netns_link.h"
#include "up/local_cluster.h"
#include "up/local_job.h"
#include "zmq/context.h"
#include "zmq/plane_keys.h"

namespace moerl::bench {
namespace {

using json = nlohmann::json;

struct bench_args {
  bool json_out = false;
  int requests = 3000;      // sequential step round trips
  int window = 32;          // episodes in flight in the throughput run
  double duration_s = 3.0;  // seconds of the throughput run
  int workers = 4;          // env.workers of the env node
  bool no_netns = false;
};

constexpr int kTurns = 4;  // task.difficulty of the guess episodes
constexpr int kTimeoutMs = 10000;

// A rollout worker's side of the wire (env/ENV.md), without the link's bookkeeping:
// one DEALER, JSON frames, replies matched by id.
class env_dealer {
 public:
  env_dealer(const std::string& endpoint, const zmq::plane_keys& keys) {
    ctx_ = need(zmq::zmq_context::create(keys), "a ZeroMQ context with the cluster's plane keys");
    sock_ = zmq_socket(ctx_->handle(), ZMQ_DEALER);
    need(ctx_->secure_client(sock_), "CURVE on the env link");
    int linger = 0, hwm = 100000;
    zmq_setsockopt(sock_, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(sock_, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(sock_, ZMQ_RCVHWM, &hwm, sizeof hwm);
    if (zmq_connect(sock_, endpoint.c_str()) != 0)
      throw std::runtime_error("zmq_connect " + endpoint + ": " + zmq_strerror(zmq_errno()));
  }
  ~env_dealer() { zmq_close(sock_); }
  uint64_t send(json req) {
    const uint64_t id = ++next_id_;
    req["id"] = id;
    const std::string bytes = req.dump();
    if (zmq_send(sock_, bytes.data(), bytes.size(), 0) < 0)
      throw std::runtime_error(std::string("zmq_send: ") + zmq_strerror(zmq_errno()));
    return id;
  }
  // The next reply; a refusal or silence past the timeout stops the benchmark.
  json recv() {
    json r = recv_any();
    if (!r.value("ok", false)) throw std::runtime_error("env node refused a request: " + r.dump());
    return r;
  }
  // The next reply, a refusal too; silence past the timeout stops the benchmark.
  json recv_any() {
    zmq_pollitem_t item{sock_, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, kTimeoutMs) <= 0)
      throw std::runtime_error("no reply from the env node within " + std::to_string(kTimeoutMs) +
                               " ms");
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    zmq_msg_recv(&msg, sock_, 0);
    json r =
        json::parse(std::string(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg)),
                    nullptr, false);
    zmq_msg_close(&msg);
    if (!r.is_object()) throw std::runtime_error("env node sent a non-object: " + r.dump());
    return r;
  }
  json reset(uint64_t seed) { return json{{"op", "reset"}, {"task", "guess"}, {"seed", seed}}; }
  // A wrong guess (the hidden number is seed % 10): every episode runs its kTurns steps.
  json step(uint64_t session, uint64_t seed) {
    return json{{"op", "step"}, {"session", session}, {"action", {3 + (seed + 1) % 10}}};
  }

 private:
  std::shared_ptr<zmq::zmq_context> ctx_;
  void* sock_ = nullptr;
  uint64_t next_id_ = 0;
};

// Sequential step round trips: one request in flight, a reset (not timed) whenever the
// episode ended.
json step_rtt(env_dealer& d, int requests) {
  std::vector<double> us;
  us.reserve(requests);
  uint64_t seed = 1, session = 0;
  bool open = false;
  for (int i = 0; i < requests;) {
    if (!open) {
      d.send(d.reset(++seed));
      session = d.recv()["session"].get<uint64_t>();
      open = true;
      continue;
    }
    const auto t0 = bench_clock::now();
    d.send(d.step(session, seed));
    const json r = d.recv();
    us.push_back(us_since(t0));
    open = !r.value("done", false);
    ++i;
  }
  return latency_summary_us(std::move(us));
}

// `window` episodes in flight for `duration_s`: each reply sends that episode's next request.
json throughput(env_dealer& d, int window, double duration_s) {
  struct episode {
    uint64_t seed = 0, session = 0;
  };
  std::vector<episode> eps(window);
  std::map<uint64_t, size_t> pending;  // request id -> episode
  uint64_t next_seed = 1000;
  for (size_t e = 0; e < eps.size(); ++e) {
    eps[e].seed = ++next_seed;
    pending[d.send(d.reset(eps[e].seed))] = e;
  }
  uint64_t steps = 0, resets = 0;
  const auto t0 = bench_clock::now();
  bool stopping = false;
  double wall = 0;
  while (!pending.empty()) {
    const json r = d.recv();
    const auto it = pending.find(r["id"].get<uint64_t>());
    if (it == pending.end()) throw std::runtime_error("reply to an unknown request: " + r.dump());
    episode& ep = eps[it->second];
    const size_t e = it->second;
    pending.erase(it);
    if (r.contains("session")) {
      ep.session = r["session"].get<uint64_t>();
      ++resets;
    } else {
      ++steps;
    }
    if (!stopping && seconds_since(t0) >= duration_s) {
      stopping = true;
      wall = seconds_since(t0);
    }
    if (stopping) continue;  // drain what is in flight, count nothing more
    if (r.value("done", false)) {
      ep.seed = ++next_seed;
      pending[d.send(d.reset(ep.seed))] = e;
    } else {
      pending[d.send(d.step(ep.session, ep.seed))] = e;
    }
  }
  return {{"window", window},
          {"seconds", wall},
          {"steps", steps},
          {"resets", resets},
          {"steps_per_s", steps / wall},
          {"resets_per_s", resets / wall}};
}

// The endpoint the coordinator lists for `name` once it runs.
std::string wait_endpoint(sims::job_console& console, const std::string& name) {
  const auto until = bench_clock::now() + std::chrono::seconds(60);
  while (bench_clock::now() < until) {
    if (auto nodes = console.call("nodes"); nodes && nodes->is_array()) {
      for (const auto& n : *nodes)
        if (n.value("name", "") == name && n.value("state", "") == "running" &&
            !n.value("endpoint", "").empty())
          return n["endpoint"].get<std::string>();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  throw std::runtime_error(name + " did not come up within 60 s");
}

// Until every environment actor of the node is up: the node lists itself running before its
// actors have all started (on a loaded machine, seconds before), and refuses a reset routed
// to one that is not there yet ("environment N is restarting"). `workers` sessions held open
// at once take one actor each (a reset goes to the least-loaded actor), so they all open only
// once every actor answers. They stay open, one idle session per actor: the load stays even.
void wait_env_actors(env_dealer& d, int workers) {
  const auto until = bench_clock::now() + std::chrono::seconds(60);
  int open = 0;
  uint64_t seed = 500;
  while (open < workers) {
    d.send(d.reset(++seed));
    const json r = d.recv_any();
    if (r.value("ok", false)) {
      ++open;
      continue;
    }
    const std::string why = r.value("error", "");
    if (why.find("is restarting") == std::string::npos || bench_clock::now() > until)
      throw std::runtime_error("env node refused a request: " + r.dump());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

json measure(const std::string& endpoint, const bench_args& a, const zmq::plane_keys& keys) {
  env_dealer d(endpoint, keys);
  wait_env_actors(d, a.workers);
  (void)step_rtt(d, 200);  // warm-up: connection, the environment actors' first sessions
  json out = {{"endpoint", endpoint}};
  out["step_rtt"] = step_rtt(d, a.requests);
  out["throughput"] = throughput(d, a.window, a.duration_s);
  return out;
}

json run_all(const bench_args& a, const std::string& dir) {
  // The netns env node listens off loopback, so the cluster needs a plane secret (CURVE on
  // the env plane); both env nodes use it, so local and netns figures compare like for like.
  const std::string secret = dir + "/plane.secret";
  need(zmq::write_new_plane_secret(secret), "writing the cluster's plane secret");
  const zmq::plane_keys keys = need(zmq::load_plane_keys(secret), "the plane keys");
  // The netns env node's control plane is off loopback too, so it must run TLS (the control
  // plane's rule, actors/caf_setup.h): the whole cluster gets one CA, local and netns alike.
  const std::string ca = dir + "/ca";
  need(actors::write_cluster_ca(ca, 1), "writing the cluster's CA");
  up::local_job_options jo;
  jo.overrides = {"job.kind=grpo",
                  "task.name=guess",
                  "task.difficulty=" + std::to_string(kTurns),
                  "job.rollout_ep_ranks=1",
                  "env.nodes=0",
                  "env.workers=" + std::to_string(a.workers),
                  "env.step_latency_ms=0",
                  "store.url=" + dir + "/store",
                  "node.plane_secret_file=" + secret,
                  "node.tls_ca=" + ca + "/ca.crt",
                  "node.tls_certificate=" + ca + "/tls.crt",
                  "node.tls_key=" + ca + "/tls.key"};
  jo.store_prefix = "bench";
  jo.iterations = 1000000;
  jo.console = "tcp://127.0.0.1:" + std::to_string(need(up::free_tcp_port(), "a free port"));
  jo.log_dir = dir + "/logs";
  jo.nodes = {{"env", "env-local", {}}};
  const std::string console_address = jo.console;
  auto job = need(up::local_job::configure(std::move(jo)), "configuring the env node");
  need(job->start(), "starting a coordinator and an env node");
  const config defaults = config::defaults();
  // The cluster has a plane secret, so its console answers CURVE clients only (the admin
  // plane's rule, zmq::admin_plane_keys): the same keys as the env plane's.
  sims::job_console console(console_address, defaults.get_string("console.token"),
                            static_cast<int>(defaults.get_int("console.timeout_ms")), keys);
  json out = {
      {"bench", "env"},
      {"task", "guess"},
      {"turns_per_episode", kTurns},
      {"env_workers", a.workers},
      {"env_step_latency_ms", 0},
      {"transport", "ZeroMQ DEALER -> ROUTER over TCP with CURVE, JSON frames (env/ENV.md)"},
      {"load_average_start", host_load_average()}};
  try {
    out["local"] = measure(wait_endpoint(console, "env-local"), a, keys);
    std::string why = a.no_netns ? "--no-netns" : sims::netns_link::unavailable_reason();
    std::unique_ptr<sims::netns_link> link;
    if (why.empty()) {
      auto l = sims::netns_link::create(0);
      if (l) {
        link = std::move(*l);
        need(job->add_node({"env", "env-netns", {"node.host=" + link->ns_address()}},
                           link->exec_prefix()),
             "starting the env node inside a network namespace");
        out["netns"] = measure(wait_endpoint(console, "env-netns"), a, keys);
        out["netns"]["link"] = link->host_address() + " <-> " + link->ns_address() + " (veth)";
      } else {
        why = l.err().message;
      }
    }
    if (!why.empty()) out["netns"] = {{"skipped", why}};
    if (out["netns"].contains("step_rtt")) {
      out["netns_over_local_p50"] = out["netns"]["step_rtt"]["p50_us"].get<double>() /
                                    out["local"]["step_rtt"]["p50_us"].get<double>();
      out["netns_over_local_steps_per_s"] =
          out["netns"]["throughput"]["steps_per_s"].get<double>() /
          out["local"]["throughput"]["steps_per_s"].get<double>();
    }
  } catch (...) {
    (void)job->stop(15000);
    throw;
  }
  (void)job->stop(15000);
  out["load_average_end"] = host_load_average();
  out["provenance"] = collect_provenance();
  return out;
}

void print_text(const json& out) {
  for (const char* where : {"local", "netns"}) {
    if (!out.contains(where)) continue;
    const json& m = out[where];
    if (m.contains("skipped")) {
      std::printf("%-6s skipped: %s\n", where, m["skipped"].get<std::string>().c_str());
      continue;
    }
    std::printf(
        "%-6s step round trip p50 %.0f us, p99 %.0f us (%zu steps); %.0f steps/s with %d "
        "episodes in flight (%s)\n",
        where, m["step_rtt"]["p50_us"].get<double>(), m["step_rtt"]["p99_us"].get<double>(),
        m["step_rtt"]["n"].get<size_t>(), m["throughput"]["steps_per_s"].get<double>(),
        m["throughput"]["window"].get<int>(), m["endpoint"].get<std::string>().c_str());
  }
}

}  // namespace

void add_env_bench_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "env", "environment plane: env-step round trips and steps/s through one env node");
  static bench_args a;
  cmd->add_flag("--json", a.json_out, "print JSON only");
  cmd->add_option("--requests", a.requests, "sequential step round trips per placement")
      ->check(CLI::Range(10, 10000000));
  cmd->add_option("--window", a.window, "episodes in flight in the throughput run")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--duration", a.duration_s, "seconds of each throughput run")
      ->check(CLI::Range(0.1, 600.0));
  cmd->add_option("--workers", a.workers, "environment actors of the env node (env.workers)")
      ->check(CLI::Range(1, 256));
  cmd->add_flag("--no-netns", a.no_netns, "measure the local placement only");
  cmd->callback([] {
    run_bench_command("env", [] {
      auto dir = temp_dir::create("bench-env");
      if (!dir) throw std::runtime_error(dir.err().to_string());
      json out = run_all(a, (*dir)->path());
      if (a.json_out)
        std::cout << out.dump(2) << "\n";
      else
        print_text(out);
    });
  });
}

}  // namespace moerl::bench
