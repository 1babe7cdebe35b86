#include "messages/detail/frame.h"
#include "messages/metrics.capnp.h"
#include "messages/metrics.h"

namespace moerl::messages {
using namespace detail;

template <>
std::string encode(const metrics_snapshot& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<schema::MetricsSnapshot>();
  r.setNode(text(m.node));
  r.setUnixMs(m.unix_ms);
  auto list = r.initMetrics(m.metrics.size());
  for (unsigned i = 0; i < m.metrics.size(); ++i) {
    list[i].setName(text(m.metrics[i].name));
    list[i].setValue(m.metrics[i].value);
    auto labels = list[i].initLabels(m.metrics[i].labels.size());
    for (unsigned j = 0; j < m.metrics[i].labels.size(); ++j) {
      labels[j].setName(text(m.metrics[i].labels[j].first));
      labels[j].setValue(text(m.metrics[i].labels[j].second));
    }
  }
  return frame(kind::metrics_snapshot, b);
}

template <>
result<metrics_snapshot> decode(const void* data, size_t size, const decode_limits& lim) {
  return decode_frame<schema::MetricsSnapshot, metrics_snapshot>(
      kind::metrics_snapshot, data, size, lim,
      [](schema::MetricsSnapshot::Reader r, metrics_snapshot& m) -> status {
        m.node = str(r.getNode());
        m.unix_ms = r.getUnixMs();
        for (auto x : r.getMetrics()) {
          metric out{str(x.getName()), x.getValue(), {}};
          for (auto l : x.getLabels()) out.labels.emplace_back(str(l.getName()), str(l.getValue()));
          m.metrics.push_back(std::move(out));
        }
        return {};
      });
}

}  // namespace moerl::messages
