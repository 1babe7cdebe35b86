#include "sims/job_console.h"

#include <cstdlib>

#include "common/status_try.h"
#include "console/console_client.h"

namespace moerl::sims {

result<nlohmann::json> job_console::call(
    const std::string& command, const std::vector<std::string>& args,
    const std::vector<std::pair<std::string, std::string>>& options) {
  messages::admin_request req;
  req.request_id = next_id_++;
  req.token = token_;
  req.command = command;
  req.args = args;
  req.options = options;
  ASSIGN_OR_RETURN(auto rep, console::console_call(address_, req, timeout_ms_, keys_));
  if (!rep.ok) return rep.err;
  auto body = nlohmann::json::parse(rep.body_json, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    return error{errc::malformed_message, "console reply to '" + command + "' is not JSON"};
  }
  return body;
}

result<std::vector<node_view>> parse_nodes(const nlohmann::json& body) {
  if (!body.is_array()) return error{errc::malformed_message, "nodes reply is not a list"};
  std::vector<node_view> out;
  for (const auto& n : body) {
    if (!n.is_object() || !n.contains("name") || !n.contains("role") || !n.contains("state") ||
        !n["name"].is_string() || !n["role"].is_string() || !n["state"].is_string()) {
      return error{errc::malformed_message,
                   "nodes reply entry lacks name, role or state: " + n.dump()};
    }
    node_view v;
    v.id = n.value("id", std::string());
    v.name = n["name"];
    v.role = n["role"];
    v.state = n["state"];
    if (n.contains("pid") && n["pid"].is_number_integer()) v.pid = n["pid"].get<pid_t>();
    if (n.contains("restarts") && n["restarts"].is_number_integer()) v.restarts = n["restarts"];
    if (n.contains("leases") && n["leases"].is_number_integer()) v.leases = n["leases"];
    if (n.contains("group") && n["group"].is_string()) v.group = n["group"];
    if (n.contains("stats")) v.stats = n["stats"];
    out.push_back(std::move(v));
  }
  return out;
}

result<std::string> console_address_of(const std::string& host_port) {
  if (host_port.find("://") != std::string::npos) return host_port;
  const auto colon = host_port.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == host_port.size()) {
    return error{errc::invalid_argument, "--against wants HOST:PORT, got '" + host_port + "'"};
  }
  char* end = nullptr;
  const long port = std::strtol(host_port.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port <= 0 || port > 65535) {
    return error{errc::invalid_argument, "--against: bad port in '" + host_port + "'"};
  }
  return "tcp://" + host_port;
}

}  // namespace moerl::sims
