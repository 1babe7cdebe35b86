// JSON text that never throws on what a peer sent. Strings from the wire (a node's name, a
// cause, a group) reach JSON bodies that a console, a health file or the store gets; plain
// nlohmann::json::dump() throws type_error 316 on invalid UTF-8, and an exception in an actor's
// handler ends the actor (the live-port fuzzer, tests/fuzz/, once stopped the coordinator so
// with one mutated join). Invalid bytes come out as U+FFFD instead.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace moerl {

inline std::string json_text(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace moerl
