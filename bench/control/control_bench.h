// `moerl bench control --json`: the control plane's costs, printed as JSON with provenance.
//   lease_rtt_in_process   lease round trip to a coordinator actor in this process
//   lease_rtt_cross_process  the same to a `moerl node --role coordinator` child over TCP
//   leased_units_per_s     units leased (and handed back) per second through one coordinator
//                          process by 8 leaser processes, each keeping a window of requests
//                          in flight; Ray's published 1:1 actor-call rates (~2,000/s sync,
//                          ~8,700/s async) are printed beside it for comparison.
// Every lease is made durable before it is answered (the ledger's write-ahead contract); the
// local store runs without fsync here (store.local_fsync=false), which the JSON states.
#pragma once

namespace CLI {
class App;
}

namespace moerl::bench {

void add_control_bench_command(CLI::App& bench);

}  // namespace moerl::bench
