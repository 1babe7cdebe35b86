@0xe6ff9d907fe7d762;
# Liveness and interruption messages.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("moerl::schema");

struct Heartbeat {
  node @0 :Text;               # sender's node id (moerl's own random id, not CAF's)
  role @1 :Text;               # coordinator|rollout|reward|env|buffer|trainer|weights
  pid @2 :UInt32;              # OS process id (for the console and simulations)
  seq @3 :UInt64;              # increases by one per heartbeat from this node
  sentUnixMs @4 :UInt64;       # sender's wall clock when sent
  state @5 :Text;              # "starting", "running", "draining", "exiting"
  leases @6 :UInt32;           # leases the node holds right now
  restarts @7 :UInt32;         # actor restarts this node's supervisor has made so far
  name @8 :Text;               # display name of the node (node.name or role-<id prefix>)
  endpoint @9 :Text;           # the node's sample-plane endpoint (buffer shards), else empty
}

struct InterruptionNotice {
  enum Source {
    imdsSpot @0;               # EC2 IMDS spot/instance-action
    imdsRebalance @1;          # EC2 IMDS events/recommendations/rebalance
    sigterm @2;                # SIGTERM (kubelet drain)
    console @3;                # an operator's console command
    simulation @4;             # a sims/ scenario
  }
  node @0 :Text;               # node being interrupted
  source @1 :Source;           # where the notice came from
  deadlineUnixMs @2 :UInt64;   # the node will be gone at this wall-clock time
  issuedUnixMs @3 :UInt64;     # when the notice was raised
  reason @4 :Text;             # free text (e.g. the IMDS action "terminate")
}
