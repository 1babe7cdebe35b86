@0x946325bfa8fa6d7e;
# What the coordinator and a buffer shard tell each other about the ledger: the events a
# group commit released for one shard, and the shard's acknowledgement of an attempt's
# groups. See ledger/LEDGER.md for what each event does to the shard.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("moerl::schema");

struct LedgerEvent {
  enum Kind {
    attemptOpened @0;          # expect groups x groupSize samples of (unit, attempt)
    attemptFenced @1;          # purge staged samples of (unit, attempt) and refuse later ones
    unitCommitted @2;          # staged samples of (unit, attempt) become servable
  }
  kind @0 :Kind;               # what happened
  unit @1 :UInt64;             # the work unit it concerns
  attempt @2 :UInt32;          # the attempt (fencing token) it concerns
  groupSize @3 :UInt32;        # attemptOpened: samples expected per group; else 0
  groups @4 :List(UInt64);     # attemptOpened: the unit's prompt groups; else empty
}

struct LedgerEvents {
  # Every event one flush of the ledger released for one shard, as one CAF message: one
  # message per event cost the receiving node as much as the coordinator's whole ledger work
  # (moerl bench control). The receiver is the shard, so the shard is not named.
  events @0 :List(LedgerEvent);  # in the ledger's order
}

struct HandedGroup {
  # One group as a shard handed it to a trainer (the samples carry unit, attempt and group).
  unit @0 :UInt64;
  attempt @1 :UInt32;
  group @2 :UInt64;
  handout @3 :UInt64;          # the shard's hand-out id (Batch.handouts)
}

struct TrainerClaim {
  # Trainer -> coordinator, once per train step (ledger/LEDGER.md, "Claimed before trained"):
  # the groups of the batch it is about to train, and those its step has made a policy
  # version with since its last claim.
  consumer @0 :Text;           # the trainer consumer's name
  incarnation @1 :UInt64;      # its incarnation (BatchRequest.incarnation), > 0
  claims @2 :List(HandedGroup);
  confirmed @3 :List(HandedGroup);
}

struct TrainerClaimReply {
  granted @0 :List(Bool);      # per claimed group, in order: may the trainer train it
}

struct ShardAck {
  # A shard admitted every sample of an attempt: the coordinator's ledger may commit it.
  unit @0 :UInt64;             # the work unit
  attempt @1 :UInt32;          # the attempt whose samples were admitted
  shard @2 :Text;              # the acknowledging shard's name
  acceptedGroups @3 :List(UInt64);  # groups admitted whole; servable once the unit commits
  staleGroups @4 :List(UInt64);     # groups with a sample older than max_staleness: dropped
}

struct ConsumptionStep {
  # One step of a group a shard handed to a trainer (ledger/LEDGER.md, "Handed to a trainer").
  unit @0 :UInt64;
  attempt @1 :UInt32;
  group @2 :UInt64;
  numSamples @3 :UInt32;       # the unit's group size
  handout @4 :UInt64;          # the shard's hand-out id
  step @5 :UInt8;              # ledger::handout_step: consumed, handed, trained, returned, dropped
}

struct ShardReports {
  # Everything one pass of a shard's loop has for the ledger, in one durable round trip:
  # one call per ack and per hand-out step kept the shard from its socket for about a
  # quarter of its time in the default `moerl up` (about 19 calls of ~1.2 ms per iteration).
  acks @0 :List(ShardAck);              # in the order the shard made them
  consumed @1 :List(ConsumptionStep);   # in the order the shard made them
}

struct ShardReportsReply {
  # Per item, acks first, then hand-out steps, in order: "" recorded, else why the ledger
  # refused it (the shard logs it and does not send it again).
  errors @0 :List(Text);
}
