@0xbbd860ccab0bd394;
# An error that travels in messages. Mirrors moerl::errc (common/error.h) value for value;
# tests/messages checks the two enums agree. Never renumber.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("moerl::schema");

enum ErrorCode {
  ok @0;                  # no error
  invalidArgument @1;     # a caller passed a value outside the documented domain
  invalidConfig @2;       # a config file or override is malformed, unknown or out of range
  malformedMessage @3;    # bytes from the network did not decode as the expected message
  messageTooLarge @4;     # a message exceeded the configured maximum size
  truncatedMessage @5;    # a message ended before its declared length
  unknownCommand @6;      # an admin/console command is not known
  unknownNode @7;         # a node id named in a request does not exist
  unauthorized @8;        # an admin request carried a wrong or missing token
  timeout @9;             # an operation did not finish inside its deadline
  peerDead @10;           # a peer process died or stopped progressing
  staleAttempt @11;       # a sample or report carried a fenced-off (old) lease attempt
  duplicate @12;          # a sample with an already-accepted (unit, attempt, seq) arrived again
  stalePolicy @13;        # a sample's policy version is older than max_staleness allows
  notFound @14;           # a requested object, unit or key does not exist
  ioError @15;            # a file, socket or object-store operation failed
  fabricError @16;        # a libfabric call failed (message names the call)
  providerUnavailable @17;# a required fabric provider is absent on this host
  cudaError @18;          # a CUDA/NCCL call failed
  capacityExceeded @19;   # a bounded queue/buffer is full; retry after credit returns
  shuttingDown @20;       # the node is draining or exiting and refuses new work
  internal @21;           # an invariant broke inside moerl (a bug); message says which
}

struct Error {
  code @0 :ErrorCode;     # what kind of failure
  message @1 :Text;       # names what was wrong: the field, key, peer or call
}
