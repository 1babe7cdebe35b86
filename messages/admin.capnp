@0xea30b9071c350d43;
# Admin plane: console requests and replies (ZeroMQ REQ/REP).

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("moerl::schema");

using import "error.capnp".Error;

struct AdminRequest {
  requestId @0 :UInt64;        # echoed in the reply
  token @1 :Text;              # shared secret from config; wrong/missing -> unauthorized
  command @2 :Text;            # "status", "nodes", "inject", "drain", ...
  args @3 :List(Text);         # positional arguments, e.g. ["spot", "rollout-1"]
  options @4 :List(Option);    # named options, e.g. deadline=30
  struct Option {
    name @0 :Text;             # option name without dashes
    value @1 :Text;            # option value as text
  }
}

struct AdminReply {
  requestId @0 :UInt64;        # the request's id
  ok @1 :Bool;                 # false: see error
  error @2 :Error;             # why the command failed (code ok when ok is true)
  bodyJson @3 :Text;           # the result as a JSON document
}
