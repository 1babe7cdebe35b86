// Console <-> coordinator admin messages (schema: messages/admin.capnp).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "messages/codec.h"

namespace moerl::messages {

struct admin_request {
  uint64_t request_id = 0;
  std::string token;
  std::string command;
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> options;  // name -> value
};

struct admin_reply {
  uint64_t request_id = 0;
  bool ok = false;
  moerl::error err;       // code errc::ok when ok
  std::string body_json;  // the result as JSON text
};

// Every admin verb, as the errors for an unknown one list them (coordinator and consoles).
inline constexpr const char* kAdminVerbs =
    "status|nodes|iterations|interruptions|ledger|snapshot|inject|drain|report|shutdown";
// The read-only verbs that take no arguments.
inline bool is_view_verb(const std::string& verb) {
  return verb == "status" || verb == "nodes" || verb == "report" || verb == "iterations" ||
         verb == "interruptions" || verb == "ledger" || verb == "snapshot";
}

MOERL_MESSAGE_KIND(admin_request, kind::admin_request);
MOERL_MESSAGE_KIND(admin_reply, kind::admin_reply);
// A bare error on the wire (e.g. a reply to an undecodable request). Wrapped so that
// result<wire_error> stays unambiguous.
struct wire_error {
  moerl::error value;
};
MOERL_MESSAGE_KIND(wire_error, kind::error);

}  // namespace moerl::messages
