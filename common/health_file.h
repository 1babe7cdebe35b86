// A node's health as its pod's probes read it (deploy/: livenessProbe and readinessProbe run
// `moerl probe`). The node agent rewrites one small JSON file (node.health_file) on every
// heartbeat tick and while it joins; the probe reads it in another process. A file, not a
// port: a probe must answer even while the node has no coordinator, and a frozen or hung agent
// must fail it simply by not writing.
//
//   live:  the agent wrote within the bound and is not fenced (a fenced node that does not
//          exit is killed, as local_job does for `moerl up`);
//   ready: live, running (not draining, not joining), and the coordinator accepted one of its
//          heartbeats within the bound.
#pragma once

#include <cstdint>
#include <string>

#include "common/error.h"

namespace moerl {

struct health_record {
  std::string node;   // node name
  std::string role;   // node role
  int64_t pid = 0;    // the process that wrote it
  std::string state;  // joining | running | draining | fenced
  int64_t written_unix_ms = 0;
  int64_t accepted_unix_ms = 0;  // the coordinator's last accepted heartbeat (0: none yet)
};

enum class probe_kind { live, ready };

// Writes `r` to `path` atomically (a temporary beside it, then rename), so a probe never
// reads half a record.
status write_health(const std::string& path, const health_record& r);

// The record in `path`; an error naming the file and what is wrong with it.
result<health_record> read_health(const std::string& path);

// "" when `r` passes the probe at `now_unix_ms`, else why not (one line).
std::string probe_failure(const health_record& r, probe_kind kind, int64_t now_unix_ms,
                          int64_t within_ms);

}  // namespace moerl
