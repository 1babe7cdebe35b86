// Staging then serving: samples of an attempt stay staged (never served) until the
// ledger commits that attempt, so a sample of an attempt that later dies can never reach
// a trainer. Fencing, duplicate and staleness checks happen on admission.
#include "ledger/buffer_shard.h"

#include <algorithm>

namespace moerl::ledger {

namespace {
std::string sample_name(const messages::sample& s) {
  return "sample (unit " + std::to_string(s.work_unit) + ", attempt " + std::to_string(s.attempt) +
         ", seq " + std::to_string(s.seq) + ")";
}
}  // namespace

uint64_t sample_bytes(const messages::sample& s) {
  // Payload plus a fixed allowance for the struct and container headers.
  return 4 * (s.prompt_tokens.size() + s.tokens.size() + s.logprobs.size()) + s.worker.size() +
         sizeof(messages::sample);
}

nlohmann::json shard_stats::to_json() const {
  return {{"received", received},
          {"staged", staged},
          {"fenced", fenced},
          {"duplicate", duplicate},
          {"stale_policy", stale_policy},
          {"rejected_full", rejected_full},
          {"invalid", invalid},
          {"purged", purged},
          {"served_groups", served_groups},
          {"served_samples", served_samples},
          {"batches", batches},
          {"handed_groups", handed_groups},
          {"confirmed_groups", confirmed_groups},
          {"reserved_groups", reserved_groups},
          {"trainer_lost_stale", trainer_lost_stale},
          {"fenced_consumers", fenced_consumers},
          {"resident_samples", resident_samples},
          {"resident_bytes", resident_bytes},
          {"peak_samples", peak_samples},
          {"peak_bytes", peak_bytes}};
}

result<shard_options> shard_options::from_config(const config& cfg, const shard_id& name) {
  shard_options o;
  o.name = name;
  int64_t gs = cfg.get_int("ledger.group_size");
  int64_t cap = cfg.get_int("buffer.capacity_samples");
  int64_t bytes = cfg.get_int("buffer.capacity_bytes");
  int64_t stale = cfg.get_int("buffer.max_staleness");
  if (name.empty()) return error(errc::invalid_argument, "buffer shard: empty name");
  if (gs <= 0) return error(errc::invalid_config, "ledger.group_size must be positive");
  if (cap < gs)
    return error(errc::invalid_config, "buffer.capacity_samples (" + std::to_string(cap) +
                                           ") must hold at least one group (" + std::to_string(gs) +
                                           ")");
  if (bytes <= 0) return error(errc::invalid_config, "buffer.capacity_bytes must be positive");
  if (stale < 0) return error(errc::invalid_config, "buffer.max_staleness must be >= 0");
  o.group_size = uint32_t(gs);
  o.capacity_samples = uint64_t(cap);
  o.capacity_bytes = uint64_t(bytes);
  o.max_staleness = uint64_t(stale);
  return o;
}

// What the shard knows about one unit.
struct buffer_shard::unit_slot {
  attempt_t floor = 0;    // attempts below this are fenced
  attempt_t attempt = 0;  // attempt being staged (0: none yet)
  bool opened = false;    // the ledger told us the attempt's groups
  bool acked = false;
  bool committed = false;
  std::vector<group_id> groups;  // of the opened attempt
  std::set<uint32_t> seqs;       // seen in the staged attempt
  // group -> its samples (staged or ready); index_in_group slots taken.
  std::map<group_id, std::vector<messages::sample>> samples;
  std::map<group_id, std::set<uint32_t>> slots;
  std::set<group_id> stale;  // a sample of the group was too old
  std::map<group_id, uint64_t> group_bytes;
};

buffer_shard::buffer_shard(shard_options options) : opts_(std::move(options)) {}
buffer_shard::~buffer_shard() = default;

void buffer_shard::release(uint64_t samples, uint64_t bytes) {
  stats_.resident_samples -= samples;
  stats_.resident_bytes -= bytes;
}

void buffer_shard::purge_below(unit_slot& u, attempt_t attempt) {
  if (u.attempt != 0 && u.attempt < attempt && !u.committed) {
    for (auto& [g, v] : u.samples) {
      stats_.purged += v.size();
      release(v.size(), u.group_bytes[g]);
    }
    u.samples.clear();
    u.slots.clear();
    u.group_bytes.clear();
    u.stale.clear();
    u.seqs.clear();
    u.opened = false;
    u.acked = false;
    u.groups.clear();
    u.attempt = 0;
  }
  u.floor = std::max(u.floor, attempt);
}

status buffer_shard::admit(messages::sample s) {
  ++stats_.received;
  const unit_id uid = s.work_unit;
  auto& slot = units_[uid];
  if (!slot) slot = std::make_unique<unit_slot>();
  unit_slot& u = *slot;
  if (s.attempt < u.floor || (u.attempt != 0 && s.attempt < u.attempt)) {
    ++stats_.fenced;
    return error(errc::stale_attempt, sample_name(s) + ": attempt is fenced (current " +
                                          std::to_string(std::max(u.floor, u.attempt)) + ")");
  }
  if (u.committed && s.attempt == u.attempt) {
    ++stats_.duplicate;
    return error(errc::duplicate, sample_name(s) + ": its attempt is already committed");
  }
  if (u.attempt != 0 && s.attempt > u.attempt) {
    if (u.committed) {
      // A re-opened unit (its shard was lost elsewhere) comes back here: keep the served
      // history, start a fresh staging area.
      u.committed = false;
      u.attempt = 0;
      u.opened = false;
      u.acked = false;
      u.seqs.clear();
    } else {
      purge_below(u, s.attempt);
    }
  }
  if (s.index_in_group >= opts_.group_size) {
    ++stats_.invalid;
    return error(errc::invalid_argument, sample_name(s) + ": index_in_group " +
                                             std::to_string(s.index_in_group) + " >= group size " +
                                             std::to_string(opts_.group_size));
  }
  if (u.opened) {
    if (std::find(u.groups.begin(), u.groups.end(), s.group_id) == u.groups.end()) {
      ++stats_.invalid;
      return error(errc::invalid_argument, sample_name(s) + ": group " +
                                               std::to_string(s.group_id) + " is not in the lease");
    }
    if (s.seq >= u.groups.size() * opts_.group_size) {
      ++stats_.invalid;
      return error(errc::invalid_argument, sample_name(s) + ": seq beyond the lease's samples");
    }
  }
  if ((u.attempt == s.attempt && u.seqs.count(s.seq)) ||
      (u.attempt == s.attempt && u.slots[s.group_id].count(s.index_in_group))) {
    ++stats_.duplicate;
    return error(errc::duplicate, sample_name(s) + ": already received");
  }
  bool stale = s.policy_version + opts_.max_staleness < policy_version_;
  uint64_t bytes = stale ? 0 : sample_bytes(s);
  if (!stale && (stats_.resident_samples + 1 > opts_.capacity_samples ||
                 stats_.resident_bytes + bytes > opts_.capacity_bytes)) {
    ++stats_.rejected_full;
    return error(errc::capacity_exceeded, sample_name(s) + ": shard " + opts_.name + " is full");
  }
  u.attempt = s.attempt;
  u.seqs.insert(s.seq);
  u.slots[s.group_id].insert(s.index_in_group);
  group_id g = s.group_id;
  status result = ok_status();
  if (stale) {
    // The sample counts toward the attempt (its seq is used) but its payload is not kept;
    // the whole group is dropped at ack time, since a group must stay whole.
    ++stats_.stale_policy;
    u.stale.insert(g);
    result = error(errc::stale_policy, sample_name(s) + ": policy version " +
                                           std::to_string(s.policy_version) + " is older than " +
                                           std::to_string(policy_version_) + " - max_staleness " +
                                           std::to_string(opts_.max_staleness));
  } else {
    ++stats_.staged;
    stats_.resident_samples += 1;
    stats_.resident_bytes += bytes;
    stats_.peak_samples = std::max(stats_.peak_samples, stats_.resident_samples);
    stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.resident_bytes);
    u.group_bytes[g] += bytes;
    u.samples[g].push_back(std::move(s));
  }
  maybe_ack(uid, u);
  return result;
}

void buffer_shard::maybe_ack(unit_id unit, unit_slot& u) {
  if (!u.opened || u.acked || u.committed) return;
  if (u.seqs.size() != u.groups.size() * uint64_t(opts_.group_size)) return;
  shard_ack ack;
  ack.unit = unit;
  ack.attempt = u.attempt;
  ack.shard = opts_.name;
  for (group_id g : u.groups) {
    if (u.stale.count(g)) {
      ack.stale_groups.push_back(g);
      // A group with one stale sample is useless for group-relative advantages: free it.
      auto it = u.samples.find(g);
      if (it != u.samples.end()) {
        release(it->second.size(), u.group_bytes[g]);
        u.samples.erase(it);
        u.group_bytes.erase(g);
      }
    } else {
      ack.accepted_groups.push_back(g);
    }
  }
  u.acked = true;
  acks_.push_back(std::move(ack));
}

void buffer_shard::apply(const ledger_event& e) {
  if (e.shard != opts_.name) return;
  auto& slot = units_[e.unit];
  if (!slot) slot = std::make_unique<unit_slot>();
  unit_slot& u = *slot;
  switch (e.what) {
    case ledger_event::kind::attempt_opened: {
      if (e.attempt < u.floor || (u.attempt > e.attempt)) return;  // an old event
      if (u.committed && u.attempt < e.attempt) {
        // Re-opened after a shard loss elsewhere: the served history stays, staging restarts.
        u.committed = false;
        u.attempt = 0;
        u.acked = false;
        u.seqs.clear();
      }
      purge_below(u, e.attempt);
      u.attempt = e.attempt;
      u.opened = true;
      u.groups = e.groups;
      // Samples that arrived before the lease event are checked against it now.
      for (auto it = u.samples.begin(); it != u.samples.end();) {
        bool in_lease = std::find(u.groups.begin(), u.groups.end(), it->first) != u.groups.end();
        if (in_lease) {
          ++it;
          continue;
        }
        stats_.invalid += it->second.size();
        release(it->second.size(), u.group_bytes[it->first]);
        for (const auto& smp : it->second) u.seqs.erase(smp.seq);
        u.group_bytes.erase(it->first);
        u.slots.erase(it->first);
        it = u.samples.erase(it);
      }
      maybe_ack(e.unit, u);
      return;
    }
    case ledger_event::kind::attempt_fenced:
      if (u.committed && u.attempt == e.attempt) return;  // cannot happen; be safe
      purge_below(u, e.attempt + 1);
      return;
    case ledger_event::kind::unit_committed: {
      if (u.committed || u.attempt != e.attempt || !u.acked) return;  // idempotent
      u.committed = true;
      for (group_id g : u.groups)
        if (!u.stale.count(g) && u.samples.count(g)) ready_.push_back({e.unit, e.attempt, g});
      // After the commit, same-attempt samples are refused by the committed flag alone.
      u.seqs.clear();
      u.slots.clear();
      u.stale.clear();
      return;
    }
  }
}

void buffer_shard::set_policy_version(uint64_t version) {
  policy_version_ = std::max(policy_version_, version);
}

std::vector<shard_ack> buffer_shard::take_acks() {
  std::vector<shard_ack> out;
  out.swap(acks_);
  return out;
}

served_batch buffer_shard::serve(uint32_t max_groups, const consumer_ref& to) {
  served_batch out;
  out.batch.shard = opts_.name;
  const bool confirming = to.incarnation != 0;
  const uint64_t batch_id = next_batch_id_;
  handed_batch handed{to, {}};
  while (!ready_.empty() && out.consumed.size() < max_groups) {
    ready_group rg = ready_.front();
    ready_.pop_front();
    auto uit = units_.find(rg.unit);
    if (uit == units_.end()) continue;
    unit_slot& u = *uit->second;
    auto git = u.samples.find(rg.group);
    if (git == u.samples.end()) continue;
    auto& v = git->second;
    // Samples of a group leave in index order: trainers compute group statistics.
    std::sort(v.begin(), v.end(),
              [](const auto& a, const auto& b) { return a.index_in_group < b.index_in_group; });
    consumption c{rg.unit,         rg.attempt,
                  rg.group,        uint32_t(v.size()),
                  next_handout_++, confirming ? handout_step::handed : handout_step::consumed};
    out.consumed.push_back(c);
    stats_.served_samples += v.size();
    ++stats_.served_groups;
    const uint64_t bytes = u.group_bytes[rg.group];
    if (confirming) {
      // Kept until confirmed: a lost trainer's groups are served again from here.
      out.batch.samples.insert(out.batch.samples.end(), v.begin(), v.end());
      handed.groups.push_back({c, std::move(v), bytes});
      out.batch.handouts.push_back(c.handout);  // the trainer claims the group under it
      ++stats_.handed_groups;
    } else {
      release(v.size(), bytes);
      for (auto& smp : v) out.batch.samples.push_back(std::move(smp));
    }
    u.samples.erase(git);
    u.group_bytes.erase(rg.group);
  }
  if (!out.consumed.empty()) {
    out.batch.batch_id = next_batch_id_++;
    ++stats_.batches;
    if (confirming) handed_.emplace(batch_id, std::move(handed));
  }
  return out;
}

result<std::vector<consumption>> buffer_shard::consumer_seen(const consumer_ref& c) {
  if (c.incarnation == 0) return std::vector<consumption>{};
  auto [it, fresh] = incarnations_.emplace(c.name, c.incarnation);
  if (fresh || it->second == c.incarnation) return std::vector<consumption>{};
  if (c.incarnation < it->second) {
    ++stats_.fenced_consumers;
    return error(errc::stale_attempt, "trainer " + c.name + " incarnation " +
                                          std::to_string(c.incarnation) + " is fenced (current " +
                                          std::to_string(it->second) + ")");
  }
  const uint64_t lost = it->second;
  it->second = c.incarnation;
  return consumer_lost(c.name, lost);
}

result<std::vector<consumption>> buffer_shard::confirm(const consumer_ref& by, uint64_t batch_id) {
  auto it = handed_.find(batch_id);
  if (it == handed_.end() || it->second.to.name != by.name ||
      it->second.to.incarnation != by.incarnation) {
    ++stats_.fenced_consumers;
    return error(errc::stale_attempt, "shard " + opts_.name + ": batch " +
                                          std::to_string(batch_id) + " is not handed to trainer " +
                                          by.name + " incarnation " +
                                          std::to_string(by.incarnation));
  }
  std::vector<consumption> out;
  for (auto& g : it->second.groups) {
    release(g.samples.size(), g.bytes);
    g.step.step = handout_step::trained;
    out.push_back(g.step);
  }
  stats_.handed_groups -= it->second.groups.size();
  stats_.confirmed_groups += it->second.groups.size();
  handed_.erase(it);
  return out;
}

void buffer_shard::take_back(handed_batch& b, std::vector<consumption>& out,
                             std::vector<ready_group>& again) {
  for (auto& g : b.groups) {
    --stats_.handed_groups;
    bool stale = false;
    for (const auto& smp : g.samples)
      stale = stale || smp.policy_version + opts_.max_staleness < policy_version_;
    auto uit = units_.find(g.step.unit);
    if (stale || uit == units_.end()) {
      release(g.samples.size(), g.bytes);
      ++stats_.trainer_lost_stale;
      g.step.step = handout_step::dropped;
    } else {
      unit_slot& u = *uit->second;
      u.samples[g.step.group] = std::move(g.samples);
      u.group_bytes[g.step.group] = g.bytes;
      again.push_back({g.step.unit, g.step.attempt, g.step.group});
      ++stats_.reserved_groups;
      g.step.step = handout_step::returned;
    }
    out.push_back(g.step);
  }
}

std::vector<consumption> buffer_shard::consumer_lost(const std::string& name,
                                                     uint64_t incarnation) {
  // Lost incarnations are fenced from now on (a late request or confirmation gets nothing).
  auto& newest = incarnations_[name];
  newest = std::max(newest, incarnation);
  std::vector<consumption> out;
  std::vector<ready_group> again;  // oldest hand-out first
  for (auto it = handed_.begin(); it != handed_.end();) {
    if (it->second.to.name != name || it->second.to.incarnation > incarnation) {
      ++it;
      continue;
    }
    take_back(it->second, out, again);
    it = handed_.erase(it);
  }
  ready_.insert(ready_.begin(), again.begin(), again.end());
  return out;
}

std::vector<consumption> buffer_shard::undelivered(uint64_t batch_id) {
  std::vector<consumption> out;
  auto it = handed_.find(batch_id);
  if (it == handed_.end()) return out;
  std::vector<ready_group> again;
  take_back(it->second, out, again);
  handed_.erase(it);
  ready_.insert(ready_.begin(), again.begin(), again.end());
  return out;
}

uint64_t buffer_shard::free_samples() const {
  return stats_.resident_samples >= opts_.capacity_samples
             ? 0
             : opts_.capacity_samples - stats_.resident_samples;
}

size_t buffer_shard::num_ready_groups() const { return ready_.size(); }

}  // namespace moerl::ledger
