#include "bench/fleet/sim_host.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/atoms.h"
#include "actors/caf_setup.h"
#include "actors/interruption.h"
#include "common/config.h"
#include "job/modpow_job.h"
#include "messages/all.h"

namespace moerl::bench {
namespace {

using namespace moerl::actors;

// The live nodes of the host, in start order; victims are drawn from them at random.
struct fleet_host {
  caf::actor_system& sys;
  caf::actor coord;
  std::shared_ptr<actors::job> job;
  std::shared_ptr<zmq::zmq_context> zmq;
  std::shared_ptr<fleet_record> rec;
  sim_node_options opts;
  std::vector<caf::actor> live;
  std::mt19937_64 rng;

  void start(uint32_t n, bool spread) {
    std::uniform_int_distribution<int64_t> delay(0, std::max<int64_t>(0, opts.unit_ms - 1));
    for (uint32_t i = 0; i < n; ++i) {
      auto o = opts;
      // At the start the fleet's first leases are spread over one unit time, so units end
      // evenly rather than in waves; replacements start at once, as a new pod would.
      o.start_delay_ms = spread ? delay(rng) : 0;
      live.push_back(spawn_sim_node(sys, coord, job, zmq, rec, o));
    }
  }

  // Removes ceil(fraction x live) nodes at random from `live` and returns them.
  std::vector<caf::actor> draw(double fraction) {
    std::shuffle(live.begin(), live.end(), rng);
    size_t n = std::min(live.size(), static_cast<size_t>(std::ceil(fraction * live.size())));
    std::vector<caf::actor> out(live.end() - static_cast<std::ptrdiff_t>(n), live.end());
    live.resize(live.size() - n);
    return out;
  }
};

}  // namespace

int run_sim_host(const sim_host_args& a) {
  auto hp = parse_host_port(a.join);
  auto cfg = config::load("", a.overrides);
  if (!hp || !cfg) {
    std::cerr << "sim host: " << (!hp ? hp.err() : cfg.err()).to_string() << "\n";
    return 2;
  }
  auto cp = control_plane_options::from_config(*cfg);
  auto zmq = zmq::zmq_context::create();
  if (!cp || !zmq) {
    std::cerr << "sim host: " << (!cp ? cp.err() : zmq.err()).to_string() << "\n";
    return 2;
  }
  cp->scheduler_threads = 2;  // hundreds of simulated nodes' actors share this process
  node_caf_config ccfg(*cp);
  caf::actor_system sys{ccfg};
  auto coord = connect_with_retry(sys, *cp, hp->first, hp->second, 20000);
  if (!coord) {
    std::cerr << "sim host: " << coord.err().to_string() << "\n";
    return 1;
  }
  fleet_host host{
      sys,    *coord, job::make_modpow_job(*cfg),       *zmq, std::make_shared<fleet_record>(),
      a.node, {},     std::mt19937_64(0x5eed + a.index)};
  host.opts.heartbeat_ms = cp->heartbeat_interval_ms;
  host.opts.request_timeout_ms = cp->request_timeout_ms;
  host.start(a.nodes, true);
  std::cout << "ok started " << a.nodes << std::endl;

  for (std::string line; std::getline(std::cin, line);) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd == "stop") break;
    double fraction = 0;
    int64_t deadline_ms = 0;
    int replace = 0;
    if (cmd == "kill") {
      in >> fraction >> replace;
      auto victims = host.draw(fraction);
      for (auto& v : victims) caf::anon_send(v, sim_kill_atom::value);
      if (replace) host.start(static_cast<uint32_t>(victims.size()), false);
      std::cout << "ok kill " << victims.size() << std::endl;
    } else if (cmd == "notice") {
      in >> fraction >> deadline_ms >> replace;
      auto victims = host.draw(fraction);
      messages::interruption_notice n;
      n.source = messages::interruption_source::imds_spot;
      n.issued_unix_ms = static_cast<uint64_t>(unix_now_ms());
      n.deadline_unix_ms = n.issued_unix_ms + static_cast<uint64_t>(deadline_ms);
      n.reason = "bench fleet: spot notice to " + std::to_string(victims.size()) + " nodes";
      const std::string bytes = messages::encode(n);
      for (auto& v : victims) caf::anon_send(v, notice_atom::value, bytes);
      if (replace) host.start(static_cast<uint32_t>(victims.size()), false);
      std::cout << "ok notice " << victims.size() << std::endl;
    } else {
      std::cout << "error unknown command '" << cmd << "'" << std::endl;
    }
  }
  {
    std::ofstream f(a.out);
    f << host.rec->to_json().dump();
  }
  std::cout << "ok stopped" << std::endl;
  // Skip the actor system's orderly teardown (hundreds of nodes' links and timers): the
  // record is written, and the coordinator sees this host's nodes go as a pod's would.
  std::_Exit(0);
}

}  // namespace moerl::bench
