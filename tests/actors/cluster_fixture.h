// Multi-process tests on loopback: a real cluster of `moerl node` processes (the moerl binary
// built with the tests), driven through the console. Each test checks the books at the end:
// the invariant holds, lost = 0, duplicated = 0, every committed sample was trained, and the
// trainer verified every sample it received.
#pragma once

#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "common/config.h"
#include "up/local_cluster.h"

namespace moerl::test {

using nlohmann::json;

class cluster_test : public ::testing::Test {
 protected:
  std::string dir_;
  std::unique_ptr<up::local_cluster> c_;
  std::vector<std::string> node_names_;  // of the cluster start() started

  void SetUp() override {
    char tmpl[] = "/tmp/moerl-cluster-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (HasFailure()) dump_logs();
    c_.reset();
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }
  void dump_logs() {
    for (auto& e : std::filesystem::directory_iterator(dir_ + "/logs")) {
      std::ifstream in(e.path());
      std::vector<std::string> lines;
      for (std::string l; std::getline(in, l);) lines.push_back(l);
      std::cerr << "==== " << e.path().filename().string() << " (last 25 lines)\n";
      for (size_t i = lines.size() > 25 ? lines.size() - 25 : 0; i < lines.size(); ++i)
        std::cerr << lines[i] << "\n";
    }
  }
  // Small, quick units with fast failure detection.
  std::vector<std::string> base_overrides() {
    auto port = up::free_tcp_port();
    std::vector<std::string> o = {
        "node.heartbeat_interval_ms=200",
        "node.connection_timeout_ms=1000",
        "node.request_timeout_ms=3000",
        "actors.heartbeat_misses=10",
        "actors.iterations=4",
        "actors.units_per_iteration=6",
        "actors.groups_per_unit=2",
        "actors.work_rounds=1500",
        "ledger.group_size=8",
        "ledger.lease_timeout_ms=8000",
        "actors.sigterm_grace_ms=8000",
        "actors.drain_margin_ms=500",
        "store.url=" + dir_ + "/store",
        "store.local_fsync=false",
        "ledger.store_prefix=run/ledger",
        "console.address=tcp://127.0.0.1:" + std::to_string(port ? *port : 17499)};
    // These tests check every sample with the deterministic test work's checker: pin that
    // job where the build also has others (job.kind).
    if (moerl::find_key("job.kind")) o.push_back("job.kind=modpow");
    return o;
  }
  void start(std::vector<std::string> extra = {},
             std::vector<up::node_spec> nodes = up::default_cluster_nodes()) {
    up::cluster_options o;
    o.binary = MOERL_BINARY;
    o.overrides = base_overrides();
    for (auto& kv : extra) o.overrides.push_back(kv);
    o.log_dir = dir_ + "/logs";
    for (const auto& n : nodes) node_names_.push_back(n.name);
    o.nodes = std::move(nodes);
    auto c = up::local_cluster::start(o);
    ASSERT_TRUE(c) << c.err().to_string();
    c_ = std::move(*c);
  }
  json status() {
    auto s = c_->console("status");
    EXPECT_TRUE(s) << s.err().to_string();
    return s ? *s : json::object();
  }
  json node(const std::string& name) {
    auto n = c_->console("nodes");
    if (n)
      for (auto& x : *n)
        if (x.value("name", "") == name) return x;
    return json::object();
  }
  // Waits until `name` has registered with the coordinator. A test that kills or replays at a
  // node needs it in the run first: under load a node once joined only after a 16-iteration
  // job had ended (the job ran on the other shard, and the kill hit a node the run never had).
  void wait_joined(const std::string& name, int64_t timeout_ms = 20000) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < until) {
      if (node(name).value("state", "") == "running") return;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // console poll period
    }
    FAIL() << name << " never joined the coordinator";
  }
  // Waits until every node start() spawned has registered: a test that counts the nodes
  // (report["nodes"].size()) needs them all in the run first; start() only spawns them, and
  // a 4-iteration job can end on the nodes that joined in time.
  void wait_all_joined() {
    for (const auto& name : node_names_) wait_joined(name);
  }
  // Waits until `name` holds at least one lease (so a kill lands mid-unit).
  void wait_leases(const std::string& name, int64_t timeout_ms = 20000) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < until) {
      if (node(name).value("leases", 0u) > 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // console poll period
    }
    FAIL() << name << " never held a lease";
  }
  json wait_done(int64_t timeout_ms = 45000) {
    auto s = c_->wait_status([](const json& j) { return j.value("done", false); }, timeout_ms);
    EXPECT_TRUE(s) << s.err().to_string();
    auto r = c_->console("report");
    EXPECT_TRUE(r) << r.err().to_string();
    return r ? *r : json::object();
  }
  void expect_clean_books(const json& report) {
    try {
      check_books(report);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "report is not what the run report must be (" << e.what()
                    << "): " << report.dump();
    }
  }
  void check_books(const json& report) {
    auto a = report.value("accounting", json::object());
    EXPECT_TRUE(a.value("invariant_ok", false)) << a.dump();
    EXPECT_EQ(a.value("lost", 1u), 0u) << a.dump();
    EXPECT_EQ(a.value("duplicated", 1u), 0u) << a.dump();
    EXPECT_EQ(a.value("in_flight", 1u), 0u) << a.dump();
    EXPECT_EQ(a.value("trained", 0u), a.value("committed", 1u)) << a.dump();
    uint64_t dropped = 0;
    auto dropped_map = a.value("dropped", json::object());
    for (auto& [k, v] : dropped_map.items()) dropped += v.get<uint64_t>();
    EXPECT_EQ(a.value("dispatched", 0u), a.value("committed", 0u) + dropped) << a.dump();
    for (auto& n : report.value("nodes", json::array()))
      if (n.value("role", "") == "trainer" && n.contains("stats")) {
        EXPECT_EQ(n["stats"].value("samples_bad", 1u), 0u) << n.dump();
      }
  }
  static int exit_status(int wait_status) {
    return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1;
  }
  // The report's entry of node `name` (an empty object if it has none). Read a node's state at
  // the end from the report wait_done() fetched, not from a later console call: the run may be
  // over by then (seen in a full suite: a console call after done read state "").
  static json node_of(const json& report, const std::string& name) {
    for (const auto& n : report.value("nodes", json::array()))
      if (n.value("name", "") == name) return n;
    return json::object();
  }
  // The report's `interruptions` entry of a node (an empty object if it has none).
  static json interruption_of(const json& report, const std::string& node) {
    for (auto& i : report.value("interruptions", json::array()))
      if (i.value("node", "") == node) return i;
    return json::object();
  }
  // Runs `moerl console ARGS` against the cluster, the way a user would; returns the shell's
  // wait status, the output (stdout and stderr) in *out.
  int console_cli(const std::string& args, std::string* out) {
    std::string cmd = std::string(MOERL_BINARY) + " console --connect " + c_->console_address() +
                      " --set console.token=" + c_->token() + " " + args + " 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    char buf[512];
    out->clear();
    while (std::fgets(buf, sizeof buf, p)) *out += buf;
    return ::pclose(p);
  }
};

}  // namespace moerl::test
