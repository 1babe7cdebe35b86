// The roles a node process runs (`moerl node --role`). Inside the runtime a role is this
// enum; it is a string only at the edges: the command line (parse_role), the heartbeat a
// node registers with, and the console's JSON (to_string).
#pragma once

#include <cstdint>
#include <string>

#include "common/error.h"

namespace moerl::actors {

enum class node_role : uint8_t { coordinator, rollout, reward, env, buffer, trainer, weights };

// The role's name as the command line, the messages and the console spell it.
const char* to_string(node_role r);
// The role named `name`; errc::invalid_argument naming the valid roles for anything else.
result<node_role> parse_role(const std::string& name);
// "coordinator|rollout|reward|env|buffer|trainer|weights", for help texts and errors.
const char* role_names();

}  // namespace moerl::actors
