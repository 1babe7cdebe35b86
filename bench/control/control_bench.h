// `moerl bench control --json`: the control plane's costs, K=1 beside K=batch, printed as JSON
// with configuration, transport, journal state, load average and provenance.
//   lease_rtt_in_process     lease round trips to a coordinator actor in this process
//   lease_rtt_cross_process  the same to a `moerl node --role coordinator` child over TCP
//   leased_units_per_s       units leased (and handed back) per second through that one
//                            coordinator by `--nodes` leaser processes, each keeping a window
//                            of lease requests in flight; once with K=1 (one lease per
//                            request) and once with K=--batch (actors.lease_batch), each
//                            --repeat times interleaved; the median is the figure
// What a "leased unit" is here: lease_client.h. Every lease and hand-back is made durable
// before it is answered (the ledger's write-ahead contract, with group commit); the local
// store runs without fsync unless --fsync, and the JSON says which.
#pragma once

namespace CLI {
class App;
}

namespace moerl::bench {

void add_control_bench_command(CLI::App& bench);

}  // namespace moerl::bench
