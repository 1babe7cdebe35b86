#include "actors/node_role.h"

namespace moerl::actors {

namespace {
constexpr node_role kAll[] = {node_role::coordinator, node_role::rollout, node_role::reward,
                              node_role::env,         node_role::buffer,  node_role::trainer,
                              node_role::weights};
}  // namespace

const char* to_string(node_role r) {
  switch (r) {
    case node_role::coordinator: return "coordinator";
    case node_role::rollout: return "rollout";
    case node_role::reward: return "reward";
    case node_role::env: return "env";
    case node_role::buffer: return "buffer";
    case node_role::trainer: return "trainer";
    case node_role::weights: return "weights";
  }
  return "unknown";
}

result<node_role> parse_role(const std::string& name) {
  for (node_role r : kAll)
    if (name == to_string(r)) return r;
  return error(errc::invalid_argument, "unknown role '" + name + "' (" + role_names() + ")");
}

const char* role_names() { return "coordinator|rollout|reward|env|buffer|trainer|weights"; }

}  // namespace moerl::actors
