// `moerl console`: drive a running cluster through the coordinator's admin endpoint.
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "apps/console_top.h"
#include "apps/console_views.h"
#include "common/config.h"
#include "console/console_client.h"
#include "zmq/plane_context.h"

namespace moerl::apps {
namespace {

struct console_args {
  std::string connect, config_file;
  std::vector<std::string> overrides;
  std::vector<std::string> words;  // command and its arguments
  std::string deadline;            // --deadline as given; checked before connecting
  std::string history;             // --history as given (nodes); checked before connecting
  double interval_s = 0;           // top: seconds between frames
  bool json = false;
};

void print_human(const std::string& cmd, const nlohmann::json& body) {
  if (cmd == "nodes" && body.is_array()) {
    std::fputs(nodes_table(body).c_str(), stdout);
    return;
  }
  if (cmd == "status" && body.is_object()) {
    std::fputs(status_summary(body).c_str(), stdout);
    return;
  }
  std::cout << body.dump(2) << "\n";
}

}  // namespace

void add_console_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("console",
                                  "admin console: status | nodes | iterations | interruptions | "
                                  "ledger | snapshot | report | top [--interval S] | inject "
                                  "spot|rebalance|kill|sigterm NODE [--deadline S] | drain NODE");
  static console_args a;
  cmd->add_option("--connect", a.connect,
                  "coordinator console address (default: console.address, tcp://127.0.0.1:7411)");
  cmd->add_option("--config", a.config_file, "YAML config file (console.token, console.address)");
  cmd->add_option("--set", a.overrides, "override key=value (repeatable)")->allow_extra_args(false);
  cmd->add_option("--deadline", a.deadline,
                  "seconds until the injected interruption's deadline, in (0, 86400]");
  cmd->add_option("--history", a.history,
                  "nodes: keep the newest N entries of each per-iteration stats list");
  cmd->add_option("--interval", a.interval_s,
                  "top: seconds between frames (default 1 on a terminal, 5 otherwise)");
  cmd->add_flag("--json", a.json, "print the reply as JSON");
  cmd->add_option("command", a.words,
                  "status | nodes | top | inject spot|rebalance|kill|sigterm NODE | drain NODE")
      ->required();
  cmd->callback([] {
    auto cfg = config::load(a.config_file, a.overrides);
    if (!cfg) {
      std::cerr << "moerl console: invalid configuration: " << cfg.err().message << "\n";
      throw CLI::RuntimeError(2);
    }
    std::string address = a.connect.empty() ? cfg->get_string("console.address") : a.connect;
    if (address.find("://") == std::string::npos) address = "tcp://" + address;
    auto keys = zmq::admin_plane_keys(*cfg, address);  // CURVE off loopback
    if (!keys) {
      std::cerr << "moerl console: " << keys.err().message << "\n";
      throw CLI::RuntimeError(2);
    }
    if (a.words[0] == "top") {
      if (a.words.size() > 1) {
        std::cerr << "moerl console: top takes no arguments, got '" << a.words[1] << "'\n";
        throw CLI::RuntimeError(1);
      }
      top_options t;
      t.address = address;
      t.token = cfg->get_string("console.token");
      t.timeout_ms = static_cast<int>(cfg->get_int("console.timeout_ms"));
      t.interval_s = a.interval_s;
      t.keys = *keys;
      if (int rc = console_top(t); rc != 0) throw CLI::RuntimeError(rc);
      return;
    }
    messages::admin_request req;
    req.request_id = 1;
    req.token = cfg->get_string("console.token");
    req.command = a.words[0];
    req.args.assign(a.words.begin() + 1, a.words.end());
    if (!a.deadline.empty()) req.options.push_back({"deadline", a.deadline});
    if (!a.history.empty()) req.options.push_back({"history", a.history});
    // Refused here, before connecting: the same exit 1 the coordinator's refusal would give.
    if (auto st = console::check_console_request(req); !st) {
      std::cerr << "moerl console: " << st.err().to_string() << "\n";
      throw CLI::RuntimeError(1);
    }
    auto rep = console::console_call(address, req,
                                     static_cast<int>(cfg->get_int("console.timeout_ms")), *keys);
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
