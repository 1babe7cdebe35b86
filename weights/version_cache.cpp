#include "weights/version_cache.h"

#include <algorithm>
#include <chrono>
#include <string_view>

#include "store/digest.h"

namespace moerl::weights {

uint64_t cached_version::chunk_size(uint64_t k) const {
  const uint64_t off = chunk_offset(k);
  return off >= bytes->size() ? 0 : std::min<uint64_t>(chunk_bytes, bytes->size() - off);
}

cached_version make_cached_version(uint64_t version, std::shared_ptr<const std::string> bytes,
                                   uint64_t chunk_bytes) {
  cached_version v;
  v.version = version;
  v.chunk_bytes = std::max<uint64_t>(chunk_bytes, 1);
  v.bytes = std::move(bytes);
  v.content_hash = store::sha256_hex(*v.bytes);
  const uint64_t n = (v.bytes->size() + v.chunk_bytes - 1) / v.chunk_bytes;
  v.chunk_hashes.reserve(n);
  // A version of one chunk (every shard of `moerl up`'s default model: 200-350 KB against
  // 1 MiB chunks) has that chunk's hash already: hashing it again was half the weights
  // node's sha256 work (issue 27).
  if (n == 1)
    v.chunk_hashes.push_back(v.content_hash);
  else
    for (uint64_t k = 0; k < n; ++k)
      v.chunk_hashes.push_back(store::sha256_hex(
          std::string_view(v.bytes->data() + v.chunk_offset(k), v.chunk_size(k))));
  v.held_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  return v;
}

size_t version_cache::num_versions_locked() const {
  size_t n = 0;
  uint64_t last = 0;
  for (auto& [key, _] : held_)
    if (n == 0 || key.first != last) ++n, last = key.first;
  return n;
}

void version_cache::evict_oldest_version_locked() {
  const uint64_t oldest = held_.begin()->first.first;
  while (!held_.empty() && held_.begin()->first.first == oldest) {
    bytes_ -= held_.begin()->second->bytes->size();
    held_.erase(held_.begin());
  }
  ++evicted_;
}

status version_cache::insert(cached_version v) {
  std::lock_guard<std::mutex> g(mu_);
  const uint64_t size = v.bytes ? v.bytes->size() : 0;
  const std::string what = "version " + std::to_string(v.version) +
                           (v.num_shards > 1 ? " shard " + std::to_string(v.shard) : "");
  if (size > max_bytes_)
    return error(errc::capacity_exceeded, what + " of " + std::to_string(size) +
                                              " bytes exceeds weights.cache_bytes " +
                                              std::to_string(max_bytes_));
  const auto key = std::make_pair(v.version, v.shard);
  if (held_.count(key)) return ok_status();
  const uint64_t oldest = held_.empty() ? 0 : held_.begin()->first.first;
  if (!held_.empty() && v.version < oldest && num_versions_locked() >= max_versions_)
    return error(errc::invalid_argument, what + " is older than every version held (" +
                                             std::to_string(oldest) + "..) and the cache is full");
  bytes_ += size;
  held_[key] = std::make_shared<const cached_version>(std::move(v));
  // Oldest version first, all its shards at once; the version just inserted is never evicted
  // (it fits alone; its other shards, when they do not, were evicted before it).
  while ((num_versions_locked() > max_versions_ || bytes_ > max_bytes_) &&
         held_.begin()->first.first != key.first)
    evict_oldest_version_locked();
  while (bytes_ > max_bytes_) {  // the newest version's own shards exceed the bound alone
    auto other = held_.begin();
    if (other->first == key) ++other;
    if (other == held_.end()) break;
    bytes_ -= other->second->bytes->size();
    held_.erase(other);
  }
  return ok_status();
}

void version_cache::erase_older_than(uint64_t version) {
  std::lock_guard<std::mutex> g(mu_);
  while (!held_.empty() && held_.begin()->first.first < version) {
    bytes_ -= held_.begin()->second->bytes->size();
    held_.erase(held_.begin());
  }
}

result<std::shared_ptr<const cached_version>> version_cache::find(uint64_t version,
                                                                  uint32_t shard) const {
  std::lock_guard<std::mutex> g(mu_);
  if (auto it = held_.find({version, shard}); it != held_.end()) return it->second;
  std::string held;
  for (auto& [k, _] : held_)
    held += (held.empty() ? "" : ",") + std::to_string(k.first) +
            (k.second ? "/" + std::to_string(k.second) : "");
  return error(errc::not_found, "version " + std::to_string(version) +
                                    (shard ? " shard " + std::to_string(shard) : "") +
                                    " is not held (holds " + (held.empty() ? "none" : held) + ")");
}

bool version_cache::complete(uint64_t version) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = held_.lower_bound({version, 0});
  if (it == held_.end() || it->first.first != version) return false;
  const uint32_t n = it->second->num_shards;
  uint32_t held = 0;
  for (; it != held_.end() && it->first.first == version; ++it) ++held;
  return held == n;
}

std::vector<uint64_t> version_cache::versions() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<uint64_t> out;
  for (auto& [k, _] : held_)
    if (out.empty() || out.back() != k.first) out.push_back(k.first);
  return out;
}

uint64_t version_cache::newest() const {
  std::lock_guard<std::mutex> g(mu_);
  return held_.empty() ? 0 : held_.rbegin()->first.first;
}

uint64_t version_cache::num_bytes() const {
  std::lock_guard<std::mutex> g(mu_);
  return bytes_;
}

uint64_t version_cache::num_evicted() const {
  std::lock_guard<std::mutex> g(mu_);
  return evicted_;
}

}  // namespace moerl::weights
