#include "job/sharded_publication.h"

#include <algorithm>

#include "job/param_slicing.h"
#include "store/digest.h"

namespace moerl::job {

nlohmann::json shard_report::to_json() const {
  nlohmann::json j{{"shard", shard}, {"bytes", bytes}, {"sha256", sha256}};
  if (!cache.empty()) j["cache"] = cache;
  if (!error.empty()) j["error"] = error;
  return j;
}

result<shard_report> shard_report_from_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("shard") || !j["shard"].is_number_unsigned() ||
      !j.contains("bytes") || !j["bytes"].is_number_unsigned() || !j.contains("sha256") ||
      !j["sha256"].is_string())
    return moerl::error{
        errc::malformed_message,
        "a weight shard report needs shard, bytes and sha256: " + j.dump().substr(0, 200)};
  shard_report r;
  r.shard = j["shard"].get<uint32_t>();
  r.bytes = j["bytes"].get<uint64_t>();
  r.sha256 = j["sha256"].get<std::string>();
  r.cache = j.value("cache", std::string());
  r.error = j.value("error", std::string());
  return r;
}

namespace {

// Whether a rank's tensor is an expert tensor: its shape differs from the full tensor's.
result<bool> is_expert(const policy::param_layout& full_layout, const policy::tensor_spec& t) {
  const policy::tensor_spec* f = full_layout.find(t.name);
  if (!f) return moerl::error{errc::invalid_argument, "the full layout has no tensor " + t.name};
  return f->dims != t.dims;
}

}  // namespace

result<std::string> publication_shard(const policy::param_layout& full_layout, int rank,
                                      const std::string& share) {
  if (rank == 0) return share;
  policy::param_layout layout;
  auto values = policy::deserialize_params(share, nullptr, &layout);
  if (!values) return values.err();
  policy::param_layout experts;
  std::vector<float> data;
  for (const auto& t : layout.tensors()) {
    auto expert = is_expert(full_layout, t);
    if (!expert) return expert.err();
    if (!*expert) continue;
    experts.add(t.name, t.dims);
    data.insert(data.end(), values->begin() + t.offset, values->begin() + t.offset + t.size());
  }
  return policy::serialize_params(experts, data);
}

std::vector<shard_report> push_shards(const shard_pusher& push, uint64_t version,
                                      const policy::param_layout& full_layout,
                                      const std::vector<std::pair<int, std::string>>& shares,
                                      uint32_t num_shards, const std::string& version_hash) {
  std::vector<shard_report> out;
  for (const auto& [rank, share] : shares) {
    shard_report r;
    r.shard = static_cast<uint32_t>(rank);
    auto made = publication_shard(full_layout, rank, share);
    if (!made) {
      r.error = made.err().to_string();
      out.push_back(std::move(r));
      continue;
    }
    const std::string& bytes = *made;
    r.bytes = bytes.size();
    r.sha256 = store::sha256_hex(bytes);
    weights::shard_tag tag{r.shard, num_shards, rank == 0 ? version_hash : std::string()};
    auto held = push(version, bytes, r.sha256, tag);
    if (held)
      r.cache = *held;
    else
      r.error = held.err().to_string();
    out.push_back(std::move(r));
  }
  return out;
}

result<std::vector<messages::weight_part>> sharded_manifest_parts(
    const std::vector<shard_report>& reports, uint32_t num_shards, const std::string& key) {
  std::vector<const shard_report*> by_shard(num_shards, nullptr);
  for (const auto& r : reports)
    if (r.shard < num_shards && !r.cache.empty() && r.error.empty()) by_shard[r.shard] = &r;
  std::string missing;
  for (uint32_t k = 0; k < num_shards; ++k) {
    if (by_shard[k]) continue;
    std::string why = "not reported";
    for (const auto& r : reports)
      if (r.shard == k && !r.error.empty()) why = r.error;
    missing += (missing.empty() ? "" : "; ") + std::to_string(k) + " (" + why + ")";
  }
  if (!missing.empty())
    return moerl::error{errc::not_found,
                        "no cache holds shard(s) " + missing + " of " + std::to_string(num_shards)};
  std::vector<messages::weight_part> parts;
  for (uint32_t k = 0; k < num_shards; ++k)
    parts.push_back(
        {key + "#shard-" + std::to_string(k), k, by_shard[k]->bytes, by_shard[k]->sha256});
  return parts;
}

result<std::string> assemble_shards(const policy::param_layout& full_layout,
                                    const std::vector<weights::fetched_shard>& shards,
                                    const std::string& version_hash) {
  if (shards.empty()) return moerl::error{errc::invalid_argument, "no shards to assemble"};
  auto bad = [](size_t k, const std::string& why) {
    return moerl::error{errc::malformed_message, "weight shard " + std::to_string(k) + ": " + why};
  };
  policy::param_layout rank_layout;
  std::vector<std::vector<float>> shares;
  for (size_t k = 0; k < shards.size(); ++k) {
    if (!shards[k].bytes || shards[k].shard != k) return bad(k, "missing");
    policy::param_layout layout;
    auto values = policy::deserialize_params(*shards[k].bytes, nullptr, &layout);
    if (!values) return bad(k, values.err().message);
    if (k == 0) {
      rank_layout = std::move(layout);
      shares.push_back(std::move(*values));
      continue;
    }
    // Rank k's share: shard 0's dense tensors, shard k's expert tensors (every one of them).
    std::vector<float> share = shares[0];
    size_t experts = 0;
    for (const auto& t : layout.tensors()) {
      const policy::tensor_spec* r = rank_layout.find(t.name);
      if (!r || r->dims != t.dims)
        return bad(k, "tensor " + t.name + " is not in shard 0's layout");
      std::copy_n(values->begin() + t.offset, t.size(), share.begin() + r->offset);
      ++experts;
    }
    size_t want = 0;
    for (const auto& t : rank_layout.tensors()) {
      auto expert = is_expert(full_layout, t);
      if (!expert) return expert.err();
      want += *expert ? 1 : 0;
    }
    if (experts != want)
      return bad(k, "has " + std::to_string(experts) + " expert tensors, the layout " +
                        std::to_string(want));
    shares.push_back(std::move(share));
  }
  auto full = assemble_params(full_layout, rank_layout, shares);
  if (!full) return full.err();
  std::string bytes = policy::serialize_params(full_layout, *full);
  if (!version_hash.empty() && policy::content_hash(bytes) != version_hash)
    return moerl::error{errc::malformed_message,
                        "the version assembled from " + std::to_string(shards.size()) +
                            " shards does not match its content hash " + version_hash};
  return bytes;
}

}  // namespace moerl::job
