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
  return decode_frame<schema::Lease, lease>(kind::lease, data, size, lim,
                                            [](schema::Lease::Reader r, lease& m) -> status {
                                              if (auto st = read_unit(r.getUnit(), m.unit); !st)
                                                return st;
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

template <>
std::string encode(const lease_batch& m) {
  // A reply names a handful of shards: a linear search beats a map at that size.
  std::vector<const lease*> shard_of;  // the first lease naming each shard
  std::vector<uint32_t> index(m.leases.size());
  size_t words = 16;  // root, header fields, list tags
  for (size_t i = 0; i < m.leases.size(); ++i) {
    uint32_t s = 0;
    while (s < shard_of.size() && shard_of[s]->shard != m.leases[i].shard) ++s;
    if (s == shard_of.size()) {
      shard_of.push_back(&m.leases[i]);
      words += 4 + (m.leases[i].shard.size() + m.leases[i].shard_endpoint.size()) / 8;
    }
    index[i] = s;
    words += 5 + m.leases[i].unit.group_ids.size();  // entry, its group list
  }
  if (!m.leases.empty())
    words += (m.leases[0].worker.size() + m.leases[0].unit.task.size()) / 8 + 2;
  // One segment sized for the whole reply: hundreds of leases would otherwise grow through
  // several segments (more copying, and a segment table on the wire).
  capnp::MallocMessageBuilder b(static_cast<unsigned>(words));
  auto r = b.initRoot<schema::LeaseBatch>();
  if (!m.leases.empty()) {
    const lease& first = m.leases.front();
    r.setWorker(text(first.worker));
    r.setPolicyVersion(first.policy_version);
    r.setTask(text(first.unit.task));
    r.setSamplesPerGroup(first.unit.samples_per_group);
  }
  auto shards = r.initShards(static_cast<unsigned>(shard_of.size()));
  for (unsigned s = 0; s < shard_of.size(); ++s) {
    shards[s].setName(text(shard_of[s]->shard));
    shards[s].setEndpoint(text(shard_of[s]->shard_endpoint));
  }
  auto entries = r.initLeases(static_cast<unsigned>(m.leases.size()));
  for (unsigned i = 0; i < m.leases.size(); ++i) {
    const lease& l = m.leases[i];
    auto e = entries[i];
    e.setUnit(l.unit.id);
    e.setAttempt(l.attempt);
    e.setDeadlineUnixMs(l.deadline_unix_ms);
    e.setShard(index[i]);
    fill(e.initGroupIds(static_cast<unsigned>(l.unit.group_ids.size())), l.unit.group_ids);
  }
  return frame(kind::lease_batch, b);
}
template <>
result<lease_batch> decode(const void* data, size_t size, const decode_limits& lim) {
  return decode_frame<schema::LeaseBatch, lease_batch>(
      kind::lease_batch, data, size, lim,
      [](schema::LeaseBatch::Reader r, lease_batch& m) -> status {
        auto bad = [](const std::string& what) {
          return error{errc::malformed_message, "lease_batch: " + what};
        };
        lease common;
        common.worker = str(r.getWorker());
        common.policy_version = r.getPolicyVersion();
        common.unit.task = str(r.getTask());
        common.unit.samples_per_group = r.getSamplesPerGroup();
        std::vector<std::pair<std::string, std::string>> shards;
        for (auto x : r.getShards()) shards.emplace_back(str(x.getName()), str(x.getEndpoint()));
        auto entries = r.getLeases();
        if (entries.size() > 0 && common.unit.samples_per_group == 0)
          return bad("samples_per_group is 0");
        m.leases.reserve(entries.size());
        for (unsigned i = 0; i < entries.size(); ++i) {
          auto e = entries[i];
          const uint32_t s = e.getShard();
          if (s >= shards.size())
            return bad("lease " + std::to_string(i) + " names shard " + std::to_string(s) + " of " +
                       std::to_string(shards.size()));
          if (e.getGroupIds().size() == 0)
            return bad("lease " + std::to_string(i) + " has no groups");
          lease l = common;
          l.unit.id = e.getUnit();
          l.attempt = e.getAttempt();
          l.deadline_unix_ms = e.getDeadlineUnixMs();
          copy(l.unit.group_ids, e.getGroupIds());
          l.shard = shards[s].first;
          l.shard_endpoint = shards[s].second;
          m.leases.push_back(std::move(l));
        }
        return {};
      });
}

template <>
std::string encode(const lease_give_back& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<schema::LeaseGiveBack>();
  r.setWorker(text(m.worker));
  auto list = r.initLeases(static_cast<unsigned>(m.leases.size()));
  for (unsigned i = 0; i < m.leases.size(); ++i) {
    list[i].setUnit(m.leases[i].unit);
    list[i].setAttempt(m.leases[i].attempt);
  }
  return frame(kind::lease_give_back, b);
}
template <>
result<lease_give_back> decode(const void* data, size_t size, const decode_limits& lim) {
  return decode_frame<schema::LeaseGiveBack, lease_give_back>(
      kind::lease_give_back, data, size, lim,
      [](schema::LeaseGiveBack::Reader r, lease_give_back& m) -> status {
        m.worker = str(r.getWorker());
        m.leases.reserve(r.getLeases().size());
        for (auto l : r.getLeases()) m.leases.push_back({l.getUnit(), l.getAttempt()});
        return {};
      });
}

template <>
std::string encode(const prompt& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<schema::Prompt>();
  r.setGroupId(m.group_id);
  fill(r.initTokens(static_cast<unsigned>(m.tokens.size())), m.tokens);
  return frame(kind::prompt, b);
}
template <>
result<prompt> decode(const void* data, size_t size, const decode_limits& lim) {
  return decode_frame<schema::Prompt, prompt>(kind::prompt, data, size, lim,
                                              [](schema::Prompt::Reader r, prompt& m) -> status {
                                                m.group_id = r.getGroupId();
                                                copy(m.tokens, r.getTokens());
                                                return {};
                                              });
}

}  // namespace moerl::messages
