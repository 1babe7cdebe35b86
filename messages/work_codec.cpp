#include "messages/detail/frame.h"
#include "messages/work.capnp.h"
#include "messages/work.h"

namespace moerl::messages {
using namespace detail;

namespace {

void write_unit(schema::WorkUnit::Builder b, const work_unit& m) {
  b.setId(m.id);
  fill(b.initGroupIds(m.group_ids.size()), m.group_ids);
  b.setSamplesPerGroup(m.samples_per_group);
  b.setTaskSeed(m.task_seed);
  b.setTask(text(m.task));
}

status read_unit(schema::WorkUnit::Reader r, work_unit& m) {
  m.id = r.getId();
  copy(m.group_ids, r.getGroupIds());
  m.samples_per_group = r.getSamplesPerGroup();
  m.task_seed = r.getTaskSeed();
  m.task = str(r.getTask());
  return {};
}

}  // namespace

template <>
std::string encode(const work_unit& m) {
  capnp::MallocMessageBuilder b;
  write_unit(b.initRoot<schema::WorkUnit>(), m);
  return frame(kind::work_unit, b);
}
template <>
result<work_unit> decode(const void* data, size_t size, const decode_limits& lim) {
  return decode_frame<schema::WorkUnit, work_unit>(kind::work_unit, data, size, lim, read_unit);
}

template <>
std::string encode(const lease& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<schema::Lease>();
  write_unit(r.initUnit(), m.unit);
  r.setAttempt(m.attempt);
  r.setWorker(text(m.worker));
  r.setDeadlineUnixMs(m.deadline_unix_ms);
  r.setPolicyVersion(m.policy_version);
  r.setShard(text(m.shard));
  r.setShardEndpoint(text(m.shard_endpoint));
  return frame(kind::lease, b);
}
template <>
result<lease> decode(const void* data, size_t size, const decode_limits& lim) {
  return decode_frame<schema::Lease, lease>(
      kind::lease, data, size, lim, [](schema::Lease::Reader r, lease& m) -> status {
        if (auto st = read_unit(r.getUnit(), m.unit); !st) return st;
        m.attempt = r.getAttempt();
        m.worker = str(r.getWorker());
        m.deadline_unix_ms = r.getDeadlineUnixMs();
        m.policy_version = r.getPolicyVersion();
        m.shard = str(r.getShard());
        m.shard_endpoint = str(r.getShardEndpoint());
        return {};
      });
}

template <>
std::string encode(const lease_request& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<schema::LeaseRequest>();
  r.setWorker(text(m.worker));
  r.setMaxUnits(m.max_units);
  r.setPolicyVersion(m.policy_version);
  return frame(kind::lease_request, b);
}
template <>
result<lease_request> decode(const void* data, size_t size, const decode_limits& lim) {
  return decode_frame<schema::LeaseRequest, lease_request>(
      kind::lease_request, data, size, lim,
      [](schema::LeaseRequest::Reader r, lease_request& m) -> status {
        m.worker = str(r.getWorker());
        m.max_units = r.getMaxUnits();
        m.policy_version = r.getPolicyVersion();
        return {};
      });
}

template <>
std::string encode(const unit_report& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<schema::UnitReport>();
  r.setUnitId(m.unit_id);
  r.setAttempt(m.attempt);
  r.setWorker(text(m.worker));
  r.setStatus(static_cast<schema::UnitReport::Status>(m.status));
  r.setSamplesProduced(m.samples_produced);
  r.setReason(text(m.reason));
  return frame(kind::unit_report, b);
}
template <>
result<unit_report> decode(const void* data, size_t size, const decode_limits& lim) {
  return decode_frame<schema::UnitReport, unit_report>(
      kind::unit_report, data, size, lim,
      [](schema::UnitReport::Reader r, unit_report& m) -> status {
        m.unit_id = r.getUnitId();
        m.attempt = r.getAttempt();
        m.worker = str(r.getWorker());
        const auto s = static_cast<uint16_t>(r.getStatus());
        if (s > static_cast<uint16_t>(unit_status::failed))
          return error{errc::malformed_message, "unit_report: unknown status " + std::to_string(s)};
        m.status = static_cast<unit_status>(s);
        m.samples_produced = r.getSamplesProduced();
        m.reason = str(r.getReason());
        return {};
      });
}

}  // namespace moerl::messages
