// `moerl bench weights`: how long one policy version of S bytes takes to reach N reader
// processes from each place a rollout node can read it, beside the same run's memcpy of the
// same bytes. Paths: `cache` (a checkpoint cache, weights/cache_server.h, read with the
// rollout's version_reader: per-chunk and whole-version sha256) over ZeroMQ tcp and ipc on
// this host, `fanout_tcp` (the readers read from one another through the fan-out tree,
// weights/FANOUT.md, its root from the cache; ZeroMQ tcp on loopback), `cache_netns` and
// `fanout_netns` (the cache and each reader on a "host" of its own: a network namespace whose
// egress is shaped to --netns-link-mbit, sims/netns_switch.h), `store_local` (a local store
// directory, read and hash-checked as a rollout node reads the store) and `store_s3` (a moto S3
// server the bench starts, when /usr/bin/python3 has moto), and `store_s3_netns` (moto on the
// netns paths' host 0, where cache_netns puts its cache, each reader on a host of its own behind
// its shaped link: every rollout node pulling from the object store between hosts, the row
// fanout_netns is to be compared with). Readers are separate processes (`moerl
// bench weights-reader`), started and connected before timing; a repetition is timed from the
// moment the bench tells every reader to go until the last one holds a verified copy (one
// system-wide steady clock). Reports per path, transport, readers and size: deliver_s {p50, p99,
// max} over the repetitions, reader_s (the same over every reader's own time to its copy, all
// timed repetitions), aggregate GB/s (readers x bytes / p50) and its ratio to memcpy GB/s,
// and peer_bytes (bytes readers read from other readers, all deliveries). The push paths time
// the other direction, a trainer member's version (shard) put to a cache process (issue 27):
// `push_host` from a process beside it, `push_netns` from another namespace; a ZeroMQ put and
// a fabric put (weights/PROTOCOL.md "Fabric puts") in turn, put_s {p50, p99, max} for each,
// GB/s and the fabric's ratio to ZeroMQ, under "push".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/config.h"

namespace CLI {
class App;
}

namespace moerl::bench {

struct weights_bench_options {
  std::vector<int64_t> sizes = {64ll << 20, 512ll << 20};  // version bytes
  std::vector<int> readers = {1, 4, 8};                    // reader processes
  // Of cache_tcp, cache_ipc, cache_shm, fanout_tcp, cache_netns, fanout_netns, store_local,
  // store_s3, store_s3_netns, push_host, push_netns (the netns paths only as root; listed as
  // skipped otherwise). The push paths are asked for by name.
  std::vector<std::string> paths = {"cache_tcp",  "cache_ipc",   "cache_shm",
                                    "fanout_tcp", "store_local", "store_s3"};
  int fanout_degree = 2;  // fanout_*: children per reader in the tree (1: a chain)
  // The netns paths: each host's egress rate (tc tbf), its NIC; 0: unshaped.
  int netns_link_mbit = 1000;
  int reps = 5;    // timed deliveries per path, size and reader count
  int warmup = 1;  // untimed deliveries first (connections made, pages faulted)
  // moto holds every GET's whole body in memory: combinations whose readers x size exceed
  // this are skipped on store_s3 and store_s3_netns (and listed as skipped) rather than swap
  // the host.
  int64_t s3_max_inflight_bytes = 2ll << 30;
  std::string moerl_binary;  // what runs the readers; empty: this process's executable
  std::string moto_script;   // empty: the source tree's tests/store/moto_s3_server.py
};

// Runs the benchmark in a fresh scratch directory (removed afterwards). Throws
// std::runtime_error naming the failed step; a path that cannot run here (no moto, no root) is
// listed under "skipped" with the reason.
nlohmann::json run_weights_bench(const weights_bench_options& opt, const config& cfg);

// Registers `weights` and the hidden `weights-reader` (a reader process) under `moerl bench`.
void add_weights_bench_command(CLI::App& bench);

}  // namespace moerl::bench
