@0x90eb77a8f255c343;
# Sample-plane messages: trajectories from rollout -> reward -> buffer shard -> trainer,
# with credit-based flow control. Carried over ZeroMQ.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("moerl::schema");

struct Sample {
  workUnit @0 :UInt64;         # unit this sample belongs to
  attempt @1 :UInt32;          # lease attempt it was produced under (fencing token)
  seq @2 :UInt32;              # 0-based index of the sample within (unit, attempt)
  policyVersion @3 :UInt64;    # policy version that generated it (staleness admission)
  groupId @4 :UInt64;          # prompt group; samples of one group are served together
  indexInGroup @5 :UInt32;     # 0..G-1 inside the group
  promptTokens @6 :List(UInt32);   # the prompt, token ids
  tokens @7 :List(UInt32);     # the generated completion, token ids
  logprobs @8 :List(Float32);  # behaviour policy log-probability of each completion token
  reward @9 :Float32;          # scalar reward (valid when rewarded is true)
  rewarded @10 :Bool;          # true once a reward actor scored the sample
  worker @11 :Text;            # node id of the producing rollout worker
  generateUs @12 :UInt32;      # wall time the rollout worker spent generating it, microseconds
  rewardUs @13 :UInt32;        # wall time the reward actor spent scoring it, microseconds
  fromEnv @14 :List(UInt8);    # multi-turn: 1 where tokens[i] is an environment reply (never
                               # trained on), 0 where the policy sampled it; empty: all policy
  envUs @15 :UInt32;           # wall time the rollout waited on environment steps, microseconds
  envSteps @16 :UInt32;        # environment steps (reset excluded) of the episode
}

struct SampleAck {
  workUnit @0 :UInt64;         # unit acknowledged
  attempt @1 :UInt32;          # attempt acknowledged
  accepted @2 :UInt32;         # samples of this (unit, attempt) the shard holds in total
  dropped @3 :UInt32;          # samples of this message the shard refused
  dropReason @4 :Text;         # reason for the drops: "stale_attempt", "duplicate", "stale_policy", ...
  shard @5 :Text;              # acknowledging shard's node id
}

struct Credit {
  consumer @0 :Text;           # who grants the credit
  credits @1 :UInt32;          # how many more messages the producer may send
}

struct BatchRequest {
  trainer @0 :Text;            # requesting trainer rank's node id
  numGroups @1 :UInt32;        # wanted number of complete prompt groups
  minPolicyVersion @2 :UInt64; # samples older than this are not wanted (staleness bound)
  # The trainer consumer's incarnation (ledger/LEDGER.md, "Handed to a trainer"): a new one
  # per trainer state, higher is newer. 0: a consumer that never confirms (its groups count
  # as trained when served). A newer incarnation makes the shard serve the groups it had
  # handed to the older ones again; an older one is fenced.
  incarnation @3 :UInt64;
  # Batches of this shard the consumer's step has made a policy version with (the groups
  # are trained and leave the shard). With numGroups 0 the request only confirms.
  confirmedBatches @4 :List(UInt64);
}

struct Batch {
  batchId @0 :UInt64;          # unique per shard; a batch is served exactly once
  samples @1 :List(Sample);    # whole groups only
  shard @2 :Text;              # serving shard's node id
  # The shard's hand-out id of each group, in the order the groups' samples appear: the
  # trainer claims the groups under these ids before it trains them (ledger/LEDGER.md,
  # "Claimed before trained"). Empty from a consumer that never confirms (incarnation 0).
  handouts @3 :List(UInt64);
}
