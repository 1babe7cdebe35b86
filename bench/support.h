// What every benchmark needs and none should write for itself: stopping a run on the first
// failed step (benchmarks have no caller to return an error to, so a failed step throws and
// the command reports it), elapsed-time helpers on the steady clock, and the CLI callback
// that turns a thrown failure into "moerl bench NAME: what failed" and exit status 1, and the
// one summary of a latency distribution every report uses.
// Header-only on purpose: each bench library includes it, nothing links it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/percentile.h"

namespace moerl::bench {

using bench_clock = std::chrono::steady_clock;

inline double seconds_since(bench_clock::time_point t0) {
  return std::chrono::duration<double>(bench_clock::now() - t0).count();
}
inline double ms_since(bench_clock::time_point t0) { return seconds_since(t0) * 1e3; }
inline double us_since(bench_clock::time_point t0) { return seconds_since(t0) * 1e6; }

// CPU seconds this process (all its threads) has run: what a step costs on a shared machine,
// where wall time also counts the time other work held the cores.
inline double process_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// `size` bytes of deterministic pseudo-random data (incompressible, so no layer can cheat on
// it): what benchmarks store, send and copy.
inline std::string random_payload(int64_t size, uint64_t seed) {
  std::string out(static_cast<size_t>(size), '\0');
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i + 8 <= out.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(&out[i], &v, 8);
  }
  return out;
}

// The value of a step that must succeed; a failure throws "<step>: <error>".
template <class T>
T need(result<T> r, const std::string& step) {
  if (!r) throw std::runtime_error(step + ": " + r.err().to_string());
  return std::move(*r);
}
inline void need(const status& s, const std::string& step) {
  if (!s) throw std::runtime_error(step + ": " + s.err().to_string());
}

// A bench's helper process (a pusher, a publisher) hands its result back as a JSON file the
// bench reads once the process ended: written to a temporary name and renamed, so the bench
// sees it whole or not at all.
inline status write_report_file(const std::string& path, const nlohmann::json& report) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << report.dump();
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return error(errc::io_error, "writing " + path + ": " + ec.message());
  return ok_status();
}

// A latency distribution in microseconds as a report gives it: n, p50_us, p99_us (nearest
// rank), mean_us, max_us; {"n": 0} when nothing was measured.
inline nlohmann::json latency_summary_us(std::vector<double> us) {
  if (us.empty()) return {{"n", 0}};
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double v : us) sum += v;
  return {{"n", us.size()},
          {"p50_us", nearest_rank_percentile(us, 50)},
          {"p99_us", nearest_rank_percentile(us, 99)},
          {"mean_us", sum / static_cast<double>(us.size())},
          {"max_us", us.back()}};
}

// Runs `body` as the command `moerl bench <name>`: an exception becomes one line on stderr
// naming the benchmark and exit status 1 (CLI::RuntimeError); CLI11's own exceptions (a
// handler that chose its exit code, e.g. 2 for a bad configuration) pass through.
template <class Body>
void run_bench_command(const std::string& name, Body&& body) {
  try {
    body();
  } catch (const CLI::Error&) {
    throw;
  } catch (const std::exception& e) {
    std::cerr << "moerl bench " << name << ": " << e.what() << "\n";
    throw CLI::RuntimeError(1);
  }
}

}  // namespace moerl::bench
