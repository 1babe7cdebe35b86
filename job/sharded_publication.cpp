#include "job/sharded_publication.h"

#include <set>

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
    return moerl::error{errc::malformed_message,
                        "a weight shard report needs shard, bytes and sha256: " +
                            j.dump().substr(0, 200)};
  shard_report r;
  r.shard = j["shard"].get<uint32_t>();
  r.bytes = j["bytes"].get<uint64_t>();
  r.sha256 = j["sha256"].get<std::string>();
  r.cache = j.value("cache", std::string());
  r.error = j.value("error", std::string());
  return r;
}

std::vector<shard_report> push_shards(const shard_pusher& push, uint64_t version,
                                      const std::vector<std::pair<int, std::string>>& shares,
                                      uint32_t num_shards, const std::string& version_hash) {
  std::vector<shard_report> out;
  for (const auto& [rank, bytes] : shares) {
    shard_report r;
    r.shard = static_cast<uint32_t>(rank);
    r.bytes = bytes.size();
    r.sha256 = store::sha256_hex(bytes);
    weights::shard_tag tag{r.shard, num_shards, rank == 0 ? version_hash : std::string()};
    auto held = push(version, bytes, tag);
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
    return moerl::error{errc::not_found, "no cache holds shard(s) " + missing + " of " +
                                             std::to_string(num_shards)};
  std::vector<messages::weight_part> parts;
  for (uint32_t k = 0; k < num_shards; ++k)
    parts.push_back({key + "#shard-" + std::to_string(k), k, by_shard[k]->bytes,
                     by_shard[k]->sha256});
  return parts;
}

result<std::string> assemble_shards(const policy::param_layout& full_layout,
                                    const std::vector<weights::fetched_shard>& shards,
                                    const std::string& version_hash) {
  if (shards.empty()) return moerl::error{errc::invalid_argument, "no shards to assemble"};
  policy::param_layout rank_layout;
  std::vector<std::vector<float>> shares;
  for (size_t k = 0; k < shards.size(); ++k) {
    if (!shards[k].bytes || shards[k].shard != k)
      return moerl::error{errc::malformed_message, "shard " + std::to_string(k) + " is missing"};
    policy::param_layout layout;
    auto share = policy::deserialize_params(*shards[k].bytes, k ? &rank_layout : nullptr,
                                            k ? nullptr : &layout);
    if (!share)
      return moerl::error{share.err().code,
                          "weight shard " + std::to_string(k) + ": " + share.err().message};
    if (k == 0) rank_layout = std::move(layout);
    shares.push_back(std::move(*share));
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
