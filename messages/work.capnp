@0xd8877c8c6dbda8bf;
# Control-plane messages about rollout work: units, leases (fencing), reports.
# See ledger/LEDGER.md for the state machine these messages drive.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("moerl::schema");

struct WorkUnit {
  id @0 :UInt64;               # unique, never reused within a job
  groupIds @1 :List(UInt64);   # prompt groups in this unit (a few; bounds the unit's duration)
  samplesPerGroup @2 :UInt32;  # G: samples generated per prompt (GRPO group size)
  taskSeed @3 :UInt64;         # seed from which the env regenerates the unit's prompts deterministically
  task @4 :Text;               # task name, e.g. "sort" or "add"
}

struct Lease {
  unit @0 :WorkUnit;           # the leased unit
  attempt @1 :UInt32;          # fencing token: increases on every re-lease of the unit
  worker @2 :Text;             # node id of the leaseholder
  deadlineUnixMs @3 :UInt64;   # lease expires (unit returns to pending) at this wall-clock time
  policyVersion @4 :UInt64;    # newest policy version at lease time (the worker should run >= this)
  shard @5 :Text;              # buffer shard that must receive every sample of this attempt (its name)
  shardEndpoint @6 :Text;      # ZeroMQ endpoint of that shard's sample socket, e.g. tcp://10.0.0.7:5601
}

struct LeaseRequest {
  worker @0 :Text;             # node id asking for work
  maxUnits @1 :UInt32;         # at most this many leases in the reply
  policyVersion @2 :UInt64;    # policy version the worker currently holds
}

struct UnitReport {
  enum Status {
    finished @0;               # all samples were produced and sent to the sample plane
    returned @1;               # the worker gives the unit back unfinished (drain, notice)
    failed @2;                 # the worker could not run the unit; reason says why
  }
  unitId @0 :UInt64;           # the unit reported on
  attempt @1 :UInt32;          # the attempt the report belongs to (stale attempts are fenced)
  worker @2 :Text;             # reporting node id
  status @3 :Status;           # outcome
  samplesProduced @4 :UInt32;  # N samples sent for this attempt (commit needs shard acks of N)
  reason @5 :Text;             # free text for returned/failed
}

struct LeaseBatch {
  # The reply to a batched lease request (actors.lease_batch > 1): up to that many leases in
  # one message. Every lease of one reply has the same worker, policy version, task and group
  # size, and names one of a handful of shards: those are stated once, not per lease.
  struct Shard {
    name @0 :Text;             # buffer shard's name (Lease.shard of the leases that name it)
    endpoint @1 :Text;         # ZeroMQ endpoint of its sample socket (Lease.shardEndpoint)
  }
  struct Entry {
    unit @0 :UInt64;           # WorkUnit.id of the leased unit
    attempt @1 :UInt32;        # fencing token of this lease (Lease.attempt)
    deadlineUnixMs @2 :UInt64; # lease expires at this wall-clock time (Lease.deadlineUnixMs)
    shard @3 :UInt32;          # index into `shards` of the shard that receives its samples
    groupIds @4 :List(UInt64); # prompt groups of the unit (WorkUnit.groupIds), never empty
  }
  worker @0 :Text;             # node id/worker index of the leaseholder, for every lease
  policyVersion @1 :UInt64;    # newest policy version at lease time, for every lease
  task @2 :Text;               # task name of every unit (WorkUnit.task)
  samplesPerGroup @3 :UInt32;  # G of every unit (WorkUnit.samplesPerGroup); > 0 when leases exist
  shards @4 :List(Shard);      # the shards the leases name, each once
  leases @5 :List(Entry);      # the leases, in the order the ledger granted them
}

struct LeaseGiveBack {
  # Leases a worker fetched but never started, handed back in one message (drain, stop):
  # each unit is pending again at once instead of at its lease deadline.
  struct Lease {
    unit @0 :UInt64;           # WorkUnit.id of the unit handed back
    attempt @1 :UInt32;        # the attempt the worker holds (a stale one is refused)
  }
  worker @0 :Text;             # the leaseholder giving them back (node id/worker index)
  leases @1 :List(Lease);      # the leases handed back, each applied on its own
}

struct Prompt {
  # The prompt of one prompt group, as the env role serves it.
  groupId @0 :UInt64;          # the group asked for
  tokens @1 :List(UInt32);     # its prompt tokens (a pure function of the group id)
}
