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
  for (uint64_t k = 0; k < n; ++k)
    v.chunk_hashes.push_back(
        store::sha256_hex(std::string_view(v.bytes->data() + v.chunk_offset(k), v.chunk_size(k))));
  v.held_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  return v;
}

status version_cache::insert(cached_version v) {
  std::lock_guard<std::mutex> g(mu_);
  const uint64_t size = v.bytes ? v.bytes->size() : 0;
  if (size > max_bytes_)
    return error(errc::capacity_exceeded,
                 "version " + std::to_string(v.version) + " of " + std::to_string(size) +
                     " bytes exceeds weights.cache_bytes " + std::to_string(max_bytes_));
  if (held_.count(v.version)) return ok_status();
  if (!held_.empty() && v.version < held_.begin()->first && held_.size() >= max_versions_)
    return error(errc::invalid_argument,
                 "version " + std::to_string(v.version) + " is older than every version held (" +
                     std::to_string(held_.begin()->first) + "..) and the cache is full");
  bytes_ += size;
  held_[v.version] = std::make_shared<const cached_version>(std::move(v));
  // Oldest first; the version just inserted is never the only one evicted for bytes (it fits).
  while (held_.size() > max_versions_ || bytes_ > max_bytes_) {
    bytes_ -= held_.begin()->second->bytes->size();
    held_.erase(held_.begin());
    ++evicted_;
  }
  return ok_status();
}

void version_cache::erase_older_than(uint64_t version) {
  std::lock_guard<std::mutex> g(mu_);
  while (!held_.empty() && held_.begin()->first < version) {
    bytes_ -= held_.begin()->second->bytes->size();
    held_.erase(held_.begin());
  }
}

result<std::shared_ptr<const cached_version>> version_cache::find(uint64_t version) const {
  std::lock_guard<std::mutex> g(mu_);
  if (auto it = held_.find(version); it != held_.end()) return it->second;
  std::string held;
  for (auto& [k, _] : held_) held += (held.empty() ? "" : ",") + std::to_string(k);
  return error(errc::not_found, "version " + std::to_string(version) + " is not held (holds " +
                                    (held.empty() ? "none" : held) + ")");
}

std::vector<uint64_t> version_cache::versions() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<uint64_t> out;
  for (auto& [k, _] : held_) out.push_back(k);
  return out;
}

uint64_t version_cache::newest() const {
  std::lock_guard<std::mutex> g(mu_);
  return held_.empty() ? 0 : held_.rbegin()->first;
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
