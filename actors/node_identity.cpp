#include "actors/node_identity.h"

#include <cstdint>
#include <random>

namespace moerl::actors {

std::string make_node_id() {
  std::random_device rd;
  static const char* hex = "0123456789abcdef";
  std::string id;
  id.reserve(32);
  for (int word = 0; word < 4; ++word) {
    uint32_t v = rd();
    for (int nib = 0; nib < 8; ++nib) id.push_back(hex[(v >> (28 - 4 * nib)) & 0xf]);
  }
  return id;
}

std::string short_node_id(const std::string& id) { return id.substr(0, 8); }

std::string default_node_name(node_role role, const std::string& id) {
  return std::string(to_string(role)) + "-" + id.substr(0, 6);
}

}  // namespace moerl::actors
