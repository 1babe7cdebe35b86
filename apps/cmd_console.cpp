// `moerl console`: drive a running cluster through the coordinator's admin endpoint.
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "actors/console_client.h"
#include "apps/commands.h"
#include "common/config.h"

namespace moerl::apps {
namespace {

struct console_args {
  std::string connect, config_file;
  std::vector<std::string> overrides;
  std::vector<std::string> words;  // command and its arguments
  std::string deadline;            // --deadline as given; checked before connecting
  bool json = false;
};

void print_human(const std::string& cmd, const nlohmann::json& body) {
  if (cmd == "nodes" && body.is_array()) {
    std::printf("%-12s %-10s %-8s %-9s %-8s %-6s %s\n", "NAME", "ROLE", "PID", "STATE", "RESTARTS",
                "LEASES", "ID");
    for (auto& n : body)
      std::printf("%-12s %-10s %-8u %-9s %-8u %-6u %s\n", n.value("name", "").c_str(),
                  n.value("role", "").c_str(), n.value("pid", 0u), n.value("state", "").c_str(),
                  n.value("restarts", 0u), n.value("leases", 0u), n.value("id", "").c_str());
    return;
  }
  if (cmd == "status" && body.is_object()) {
    auto a = body.value("accounting", nlohmann::json::object());
    std::printf("iteration %lu/%lu  queue %lu  leases %lu  nodes %lu  done %s\n",
                body.value("iteration", 0ul), body.value("iterations", 0ul),
                body.value("queue_depth", 0ul), body.value("leases", 0ul),
                body.value("nodes_alive", 0ul), body.value("done", false) ? "yes" : "no");
    std::printf("accounting: %s  invariant %s\n", a.dump().c_str(),
                body.value("invariant_ok", false) ? "ok" : "BROKEN");
    auto shards = body.value("buffer", nlohmann::json::object());
    for (auto& [shard, st] : shards.items())
      std::printf("buffer %s: %lu/%lu samples resident, %lu groups ready\n", shard.c_str(),
                  st.value("resident_samples", 0ul), st.value("capacity_samples", 0ul),
                  st.value("ready_groups", 0ul));
    return;
  }
  std::cout << body.dump(2) << "\n";
}

}  // namespace

void add_console_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("console",
                                  "admin console: status | nodes | iterations | interruptions | "
                                  "ledger | snapshot | report | inject "
                                  "spot|rebalance|kill|sigterm NODE [--deadline S] | drain NODE");
  static console_args a;
  cmd->add_option("--connect", a.connect,
                  "coordinator console address (default: console.address, tcp://127.0.0.1:7411)");
  cmd->add_option("--config", a.config_file, "YAML config file (console.token, console.address)");
  cmd->add_option("--set", a.overrides, "override key=value (repeatable)")->allow_extra_args(false);
  cmd->add_option("--deadline", a.deadline,
                  "seconds until the injected interruption's deadline, in (0, 86400]");
  cmd->add_flag("--json", a.json, "print the reply as JSON");
  cmd->add_option("command", a.words,
                  "status | nodes | inject spot|rebalance|kill|sigterm NODE | drain NODE")
      ->required();
  cmd->callback([] {
    auto cfg = config::load(a.config_file, a.overrides);
    if (!cfg) {
      std::cerr << "moerl console: invalid configuration: " << cfg.err().message << "\n";
      throw CLI::RuntimeError(2);
    }
    std::string address = a.connect.empty() ? cfg->get_string("console.address") : a.connect;
    if (address.find("://") == std::string::npos) address = "tcp://" + address;
    messages::admin_request req;
    req.request_id = 1;
    req.token = cfg->get_string("console.token");
    req.command = a.words[0];
    req.args.assign(a.words.begin() + 1, a.words.end());
    if (!a.deadline.empty()) req.options.push_back({"deadline", a.deadline});
    // Refused here, before connecting: the same exit 1 the coordinator's refusal would give.
    if (auto st = actors::check_console_request(req); !st) {
      std::cerr << "moerl console: " << st.err().to_string() << "\n";
      throw CLI::RuntimeError(1);
    }
    auto rep =
        actors::console_call(address, req, static_cast<int>(cfg->get_int("console.timeout_ms")));
    if (!rep) {
      std::cerr << "moerl console: " << rep.err().to_string() << "\n";
      throw CLI::RuntimeError(3);
    }
    if (!rep->ok) {
      if (a.json)
        std::cout << nlohmann::json{{"ok", false},
                                    {"error", errc_name(rep->err.code)},
                                    {"message", rep->err.message}}
                         .dump()
                  << "\n";
      std::cerr << "moerl console: " << rep->err.to_string() << "\n";
      throw CLI::RuntimeError(rep->err.code == errc::unauthorized ? 4 : 1);
    }
    auto body = nlohmann::json::parse(rep->body_json, nullptr, false);
    if (a.json)
      std::cout << body.dump() << "\n";
    else
      print_human(req.command, body);
  });
}

}  // namespace moerl::apps
