#include "messages/control.capnp.h"
#include "messages/control.h"
#include "messages/detail/frame.h"

namespace moerl::messages {
using namespace detail;

const char* interruption_source_name(interruption_source s) {
  switch (s) {
    case interruption_source::imds_spot: return "imds_spot";
    case interruption_source::imds_rebalance: return "imds_rebalance";
    case interruption_source::sigterm: return "sigterm";
    case interruption_source::console: return "console";
    case interruption_source::simulation: return "simulation";
  }
  return "unknown";
}

template <>
std::string encode(const heartbeat& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<schema::Heartbeat>();
  r.setNode(text(m.node));
  r.setRole(text(m.role));
  r.setPid(m.pid);
  r.setSeq(m.seq);
  r.setSentUnixMs(m.sent_unix_ms);
  r.setState(text(m.state));
  r.setLeases(m.leases);
  r.setRestarts(m.restarts);
  r.setName(text(m.name));
  r.setEndpoint(text(m.endpoint));
  return frame(kind::heartbeat, b);
}
template <>
result<heartbeat> decode(const void* data, size_t size, const decode_limits& lim) {
  return decode_frame<schema::Heartbeat, heartbeat>(
      kind::heartbeat, data, size, lim, [](schema::Heartbeat::Reader r, heartbeat& m) -> status {
        m.node = str(r.getNode());
        m.role = str(r.getRole());
        m.pid = r.getPid();
        m.seq = r.getSeq();
        m.sent_unix_ms = r.getSentUnixMs();
        m.state = str(r.getState());
        m.leases = r.getLeases();
        m.restarts = r.getRestarts();
        m.name = str(r.getName());
        m.endpoint = str(r.getEndpoint());
        return {};
      });
}

template <>
std::string encode(const interruption_notice& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<schema::InterruptionNotice>();
  r.setNode(text(m.node));
  r.setSource(static_cast<schema::InterruptionNotice::Source>(m.source));
  r.setDeadlineUnixMs(m.deadline_unix_ms);
  r.setIssuedUnixMs(m.issued_unix_ms);
  r.setReason(text(m.reason));
  return frame(kind::interruption_notice, b);
}
template <>
result<interruption_notice> decode(const void* data, size_t size, const decode_limits& lim) {
  return decode_frame<schema::InterruptionNotice, interruption_notice>(
      kind::interruption_notice, data, size, lim,
      [](schema::InterruptionNotice::Reader r, interruption_notice& m) -> status {
        m.node = str(r.getNode());
        const auto s = static_cast<uint16_t>(r.getSource());
        if (s > static_cast<uint16_t>(interruption_source::simulation))
          return error{errc::malformed_message,
                       "interruption_notice: unknown source " + std::to_string(s)};
        m.source = static_cast<interruption_source>(s);
        m.deadline_unix_ms = r.getDeadlineUnixMs();
        m.issued_unix_ms = r.getIssuedUnixMs();
        m.reason = str(r.getReason());
        return {};
      });
}

}  // namespace moerl::messages
