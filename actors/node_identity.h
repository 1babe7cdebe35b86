// A node's identity on the control plane. CAF 0.17.6 derives its node_id from MAC addresses,
// the root UUID and the pid, so two pods on host networking that both run as pid 1 collide
// (CAF-0.17-NOTES §9.4). moerl therefore never relies on CAF's id: every node draws its own
// random 128-bit id at start and carries it in every registration and heartbeat.
#pragma once

#include <string>

#include "actors/node_role.h"

namespace moerl::actors {

// 32 lower-case hex digits from the OS entropy source (std::random_device reads
// /dev/urandom on Linux). A restarted process gets a new id, as CAF's would.
std::string make_node_id();

// The short form shown in logs and the console: the first 8 hex digits.
std::string short_node_id(const std::string& id);

// Default display name: "<role>-<first 6 hex digits of the id>".
std::string default_node_name(node_role role, const std::string& id);

}  // namespace moerl::actors
