@0xe46a8a127664d92a;
# Metrics a node reports to the coordinator / admin plane.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("moerl::schema");

struct MetricsSnapshot {
  node @0 :Text;               # reporting node id
  unixMs @1 :UInt64;           # when the snapshot was taken
  metrics @2 :List(Metric);    # the values
  struct Metric {
    name @0 :Text;             # Prometheus-style name, e.g. "moerl_samples_total"
    value @1 :Float64;         # current value (counter or gauge)
    labels @2 :List(Label);    # label pairs
  }
  struct Label {
    name @0 :Text;             # label name
    value @1 :Text;            # label value
  }
}
