// The runner's view of a job through its console (the ZeroMQ admin plane that `moerl console`
// uses, console/console_client.h): status, nodes, inject. Every call has a timeout, so a dead
// or restarting coordinator shows up as an error, never a hang. Not thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "zmq/plane_keys.h"

namespace moerl::sims {

class job_console {
 public:
  // `keys`: the cluster's, for a console off loopback (zmq::admin_plane_keys).
  job_console(std::string address, std::string token, int timeout_ms,
              std::optional<zmq::plane_keys> keys = std::nullopt)
      : address_(std::move(address)),
        token_(std::move(token)),
        timeout_ms_(timeout_ms),
        keys_(std::move(keys)) {}

  // The reply body as JSON; a refused command returns the coordinator's error.
  result<nlohmann::json> call(const std::string& command, const std::vector<std::string>& args = {},
                              const std::vector<std::pair<std::string, std::string>>& options = {});
  const std::string& address() const { return address_; }

 private:
  std::string address_;
  std::string token_;
  int timeout_ms_;
  std::optional<zmq::plane_keys> keys_;
  uint64_t next_id_ = 1;
};

// One node as the console's `nodes` reply lists it.
struct node_view {
  std::string id;
  std::string name;
  std::string role;
  std::string state;  // running | draining | drained | dead
  pid_t pid = 0;
  uint32_t restarts = 0;
  uint32_t leases = 0;
  std::string group;  // the node's group across nodes ("" in none: console nodes' `group`)
  nlohmann::json stats;
};

// Parses a `nodes` reply; entries missing name/role/state are an errc::malformed_message.
result<std::vector<node_view>> parse_nodes(const nlohmann::json& body);

// "HOST:PORT" -> "tcp://HOST:PORT"; an address that already has a scheme is kept.
result<std::string> console_address_of(const std::string& host_port);

}  // namespace moerl::sims
