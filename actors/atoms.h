// CAF 0.17 atoms of moerl's control plane (at most 10 characters each). Every payload that
// is not an atom, integer or string travels as moerl_messages bytes in a std::string: CAF's
// serializer hangs on ±inf and corrupts NaN (CAF-0.17-NOTES §9.1), so no float crosses it.
#pragma once

#include <caf/atom.hpp>

namespace moerl::actors {

using register_atom = caf::atom_constant<caf::atom("register")>;    // node -> coordinator
using heartbeat_atom = caf::atom_constant<caf::atom("heartbeat")>;  // node -> coordinator
using lease_atom = caf::atom_constant<caf::atom("lease")>;          // worker -> coordinator
using report_atom = caf::atom_constant<caf::atom("report")>;        // worker -> coordinator
using leases_atom = caf::atom_constant<caf::atom("leases")>;        // worker -> coordinator: batch
using giveback_atom = caf::atom_constant<caf::atom("giveback")>;    // worker -> coordinator: batch
using flush_atom = caf::atom_constant<caf::atom("flush")>;          // coordinator: group commit
using synced_atom = caf::atom_constant<caf::atom("synced")>;        // coordinator: batch written
using shardrep_atom = caf::atom_constant<caf::atom("shardrep")>;    // shard -> coordinator
using claim_atom = caf::atom_constant<caf::atom("claim")>;          // trainer -> coordinator
using event_atom = caf::atom_constant<caf::atom("event")>;          // coordinator -> shard
using clost_atom = caf::atom_constant<caf::atom("clost")>;          // coordinator -> shard
using notice_atom = caf::atom_constant<caf::atom("notice")>;        // anyone -> node agent
using drain_atom = caf::atom_constant<caf::atom("drain")>;          // agent -> workers
using drained_atom = caf::atom_constant<caf::atom("drained")>;      // node -> coordinator
using gaveup_atom = caf::atom_constant<caf::atom("gaveup")>;        // node -> coordinator: why
using admin_atom = caf::atom_constant<caf::atom("admin")>;          // console -> coordinator
using kill_atom = caf::atom_constant<caf::atom("kill")>;            // coordinator -> node agent
using tick_atom = caf::atom_constant<caf::atom("tick")>;            // self timer
using work_atom = caf::atom_constant<caf::atom("work")>;            // worker self-drive
using restart_atom = caf::atom_constant<caf::atom("restart")>;      // supervisor timer
using restarted_atom = caf::atom_constant<caf::atom("restarted")>;  // supervisor -> observer
using stats_atom = caf::atom_constant<caf::atom("stats")>;          // query of counters
using crash_atom = caf::atom_constant<caf::atom("crash")>;          // tests: fail on purpose
using ping_atom = caf::atom_constant<caf::atom("ping")>;
using version_atom = caf::atom_constant<caf::atom("version")>;  // policy version
// Groups across nodes (node_group_core.h), member node -> coordinator.
using gjoin_atom = caf::atom_constant<caf::atom("gjoin")>;      // join the node's group
using gview_atom = caf::atom_constant<caf::atom("gview")>;      // the formed group's view
using ggather_atom = caf::atom_constant<caf::atom("ggather")>;  // one all-gather call
using gfailed_atom = caf::atom_constant<caf::atom("gfailed")>;  // the member's group work failed
using grestored_atom = caf::atom_constant<caf::atom("grestored")>;  // rank 0 restored a version
using version_atom = caf::atom_constant<caf::atom("version")>;      // policy version
using env_atom = caf::atom_constant<caf::atom("envreq")>;           // env router -> environment
using env_reply_atom = caf::atom_constant<caf::atom("envreply")>;   // environment -> env router
using shutdown_atom = caf::atom_constant<caf::atom("shutdown")>;

}  // namespace moerl::actors
