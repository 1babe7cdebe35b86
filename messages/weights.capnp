@0xa055bebf9e995db2;
# Weight versions: what the trainer publishes and rollout nodes pull.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("moerl::schema");

struct WeightPart {
  name @0 :Text;               # object-store key or tensor-group name of this part
  offset @1 :UInt64;           # byte offset of the part in the flattened parameters
  bytes @2 :UInt64;            # length of the part in bytes
  sha256 @3 :Text;             # lower-case hex SHA-256 of the part's bytes
}

struct WeightManifest {
  version @0 :UInt64;          # policy version, increasing by one per optimiser step
  contentHash @1 :Text;        # lower-case hex SHA-256 over all parameter bytes in order
  totalBytes @2 :UInt64;       # sum of the parts' bytes
  parts @3 :List(WeightPart);  # the parameters, split for parallel transfer
  createdUnixMs @4 :UInt64;    # when the trainer published it
}
