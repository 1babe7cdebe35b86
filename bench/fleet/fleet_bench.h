// `moerl bench fleet [--nodes N] [--hosts H] [--json]`: the control plane at fleet scale, for
// real. One `moerl node --role coordinator` process, 2 buffer shard processes and a trainer
// process (the modpow job, which verifies every sample it trains on), and N simulated rollout
// nodes (sim_node.h) multiplexed into H simulated-host processes (sim_host.h), each node its
// own identity with heartbeats, leases with fencing attempts and samples to the real shards
// over ZeroMQ. Phases, on the steady clock:
//   start      every node registered
//   warmup     --warmup seconds
//   measure    --measure seconds: lease round trip p50/p99 (every node's requests), units/s,
//              the coordinator's CPU (cores and per node) and RSS (per node, over its RSS
//              before any simulated node joined)
//   kill       --fraction of every host's nodes die at once (their replacements start at once);
//              --fault seconds: time until the coordinator declared them dead (their leases
//              pending again), time until each of their units was leased again, units/s until
//              back to --recovery-ratio of the measured rate
//   notice     the same fraction gets a Spot notice with --notice-ms to the deadline: drains,
//              units finished and given back, time until the given-back units were pending
//              (the coordinator's answer) and leased again, throughput recovery
// then the books: the coordinator's accounting (lost, duplicated, invariant) and the trainer's.
// JSON with the configuration, load average and provenance (bench/control/README.md).
#pragma once

namespace CLI {
class App;
}

namespace moerl::bench {

void add_fleet_bench_command(CLI::App& bench);

}  // namespace moerl::bench
