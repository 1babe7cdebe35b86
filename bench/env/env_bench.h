// `moerl bench env --json`: the environment plane's round trip, measured through one real env
// node (`moerl node --role env`, task guess, started with a coordinator as `moerl up` starts
// them), by a ZeroMQ DEALER speaking the env wire protocol (env/ENV.md) as a rollout
// worker's link does:
//   step_rtt        sequential step round trips, one request in flight: p50/p99/mean
//   steps_per_s     steps answered per second with --window episodes in flight (each episode
//                   a reset then steps until done; resets are counted apart as resets_per_s)
// once with the env node on this host ("local") and once with it inside its own network
// namespace, reached over a veth pair (sims/netns_link.h; "netns"), when namespaces work here
// (root); else the JSON says why not. env.step_latency_ms is 0: the figures are the plane's
// own cost, not an emulated environment's.
#pragma once

namespace CLI {
class App;
}

namespace moerl::bench {

void add_env_bench_command(CLI::App& bench);

}  // namespace moerl::bench
