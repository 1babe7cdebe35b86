// The ledger's events and shard acks as the control plane sends them: moerl::ledger's types
// on each side, messages::ledger_events / messages::shard_ack (messages/shard.capnp) on the
// wire. messages/ does not depend on the ledger, so the conversion lives here, at the edge.
#pragma once

#include <string>
#include <vector>

#include "common/error.h"
#include "ledger/types.h"
#include "messages/shard.h"

namespace moerl::ledger {

// Encoded messages::ledger_events. The shard is not sent: the receiver is the shard.
std::string encode_ledger_events(const std::vector<ledger_event>& events);
// Decodes what encode_ledger_events wrote; every event's shard is set to `shard`.
result<std::vector<ledger_event>> decode_ledger_events(const std::string& bytes,
                                                       const std::string& shard);

// One pass of a shard's loop for the ledger: its acks and its groups' hand-out steps, in the
// order it made them (encoded messages::shard_reports). Decoding refuses an unknown step.
std::string encode_shard_reports(const std::vector<shard_ack>& acks,
                                 const std::vector<consumption>& consumed);
struct shard_reports {
  std::vector<shard_ack> acks;
  std::vector<consumption> consumed;
};
result<shard_reports> decode_shard_reports(const std::string& bytes);

}  // namespace moerl::ledger
