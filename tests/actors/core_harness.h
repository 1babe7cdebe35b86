// What the deterministic coordinator tests start from: a coordinator_core on a manual clock
// and an in-memory ledger, with member nodes registered as their heartbeats would register
// them, and the outbound queue emptied.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/coordinator_core.h"
#include "ledger/clock.h"

namespace moerl::test {

// A valid node id made of one repeated hex digit.
inline std::string hex_id(char c) { return std::string(32, c); }

// The registration heartbeat of a running member node.
inline messages::heartbeat member(const std::string& id, const std::string& role,
                                  const std::string& name, const std::string& endpoint = "") {
  messages::heartbeat h;
  h.node = id;
  h.role = role;
  h.name = name;
  h.pid = 100;
  h.state = "running";
  h.endpoint = endpoint;
  return h;
}

inline std::unique_ptr<actors::coordinator_core> make_core(
    ledger::manual_clock& clock, const actors::coordinator_options& options,
    const ledger::ledger_options& ledger_options, const std::vector<messages::heartbeat>& members) {
  auto led = ledger::work_ledger::open(ledger_options, clock, nullptr);
  if (!led) {
    ADD_FAILURE() << led.err().to_string();
    return nullptr;
  }
  auto core = std::make_unique<actors::coordinator_core>(options, std::move(*led), clock);
  for (const auto& m : members) {
    auto st = core->register_node(m);
    EXPECT_TRUE(st) << m.name << ": " << (st ? "" : st.err().to_string());
  }
  core->take_outbound();
  return core;
}

// The moerl::error a result of the core carries, if it is one.
template <class T>
std::optional<moerl::error> as_error(const result<T>& r) {
  if (r) return std::nullopt;
  return r.err();
}

}  // namespace moerl::test
