// moerl_tls_probe: round trips to a running coordinator over its control-plane port, timed,
// for the handshake-storm figures (issue 31, bench/control/README.md "TLS handshake storm").
//
//   moerl_tls_probe HOST:PORT --seconds S [--interval-ms 20] [--set key=value ...]
//
// Connects as a node would (node.tls* from --set: the cluster's CA and a certificate it
// signed), then every interval sends one lease request and one heartbeat, each answered by
// the coordinator actor. The probe is not a registered node, so both are refused there
// (unregistered worker / node): the round trip is the path every lease and heartbeat takes
// (the TLS link, the coordinator's multiplexer and BASP broker, the coordinator's mailbox)
// without taking units from the job. Prints one JSON object: per kind the microseconds of
// every round trip with its send time (unix ms), and the requests that got no answer.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/atoms.h"
#include "actors/caf_setup.h"
#include "bench/control/lease_client.h"
#include "common/config.h"
#include "messages/all.h"

using namespace moerl;
using namespace moerl::actors;
using nlohmann::json;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: moerl_tls_probe HOST:PORT --seconds S [--interval-ms MS] "
                 "[--set key=value ...]\n";
    return 2;
  }
  double seconds = 10;
  int64_t interval_ms = 20;
  std::vector<std::string> sets;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--seconds")
      seconds = std::stod(argv[i + 1]);
    else if (k == "--interval-ms")
      interval_ms = std::stoll(argv[i + 1]);
    else if (k == "--set")
      sets.emplace_back(argv[i + 1]);
    else {
      std::cerr << "unknown option " << k << "\n";
      return 2;
    }
  }
  auto hp = parse_host_port(argv[1]);
  auto cfg = config::load("", sets);
  if (!hp || !cfg) {
    std::cerr << (hp ? cfg.err().to_string() : hp.err().to_string()) << "\n";
    return 2;
  }
  auto cp = control_plane_options::from_config(*cfg);
  if (!cp) {
    std::cerr << cp.err().to_string() << "\n";
    return 2;
  }
  node_caf_config ccfg(*cp);
  caf::actor_system sys{ccfg};
  auto coord = connect_with_retry(sys, *cp, hp->first, hp->second, 15000);
  if (!coord) {
    std::cerr << coord.err().to_string() << "\n";
    return 1;
  }
  caf::scoped_actor self{sys};
  messages::heartbeat hb;
  hb.node = "tls-probe-not-a-node";
  hb.role = "rollout";
  const auto hb_msg = caf::make_message(heartbeat_atom::value, messages::encode(hb));
  const auto lease_msg =
      caf::make_message(lease_atom::value, bench::lease_request_bytes("tls-probe/0", 1));
  json out{{"lease", {{"t_ms", json::array()}, {"us", json::array()}, {"unanswered", 0}}},
           {"heartbeat", {{"t_ms", json::array()}, {"us", json::array()}, {"unanswered", 0}}}};
  auto round_trip = [&](const caf::message& m, json& into) {
    auto t_unix = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
    auto t0 = std::chrono::steady_clock::now();
    bool answered = false;
    self->request(*coord, std::chrono::seconds(10), m)
        .receive([&](std::string&) { answered = true; }, [&](caf::error&) {});
    auto us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0);
    if (!answered) {
      into["unanswered"] = into["unanswered"].get<int>() + 1;
      return;
    }
    into["t_ms"].push_back(t_unix);
    into["us"].push_back(us.count());
  };
  auto until = std::chrono::steady_clock::now() +
               std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                   std::chrono::duration<double>(seconds));
  auto next = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() < until) {
    round_trip(lease_msg, out["lease"]);
    round_trip(hb_msg, out["heartbeat"]);
    next += std::chrono::milliseconds(interval_ms);
    std::this_thread::sleep_until(next);  // pacing between probes, not a wait for work
  }
  std::cout << out.dump() << "\n";
  std::cout.flush();
  std::_Exit(0);  // skip the orderly teardown of the remote link
}
