// `moerl bench package [--quick] [--out DIR] [--repeats N]`: runs every `moerl bench` command,
// the scenario short forms and the peers that are installed, each N times, and writes one
// directory: report.md, raw/*.json (one per run), summary.json and PNG plots
// (bench/package/README.md). This side validates the options and execs run_package.py with
// this binary's path, so the children are this same build.
#pragma once

namespace CLI {
class App;
}

namespace moerl::bench {

// Registers `package` under `moerl bench`.
void add_package_bench_command(CLI::App& bench);

}  // namespace moerl::bench
