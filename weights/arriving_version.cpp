#include "weights/arriving_version.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/status_try.h"
#include "weights/wire.h"

namespace moerl::weights {

using nlohmann::json;

arriving_version::arriving_version(uint64_t version, uint64_t num_bytes, std::string content_hash,
                                   uint64_t chunk_bytes)
    : version_(version),
      chunk_bytes_(std::max<uint64_t>(chunk_bytes, 1)),
      content_hash_(std::move(content_hash)),
      buffer_(std::make_shared<std::string>(num_bytes, '\0')) {
  hashes_.resize((num_bytes + chunk_bytes_ - 1) / chunk_bytes_);
  auto view = std::make_shared<cached_version>();
  view->version = version_;
  view->bytes = buffer_;
  view->content_hash = content_hash_;
  view->chunk_bytes = chunk_bytes_;
  view_ = std::move(view);
}

uint64_t arriving_version::chunk_size(uint64_t k) const {
  const uint64_t off = chunk_offset(k);
  return off >= buffer_->size() ? 0 : std::min<uint64_t>(chunk_bytes_, buffer_->size() - off);
}

status arriving_version::put_chunk(uint64_t k, std::string_view bytes, std::string chunk_hash) {
  if (k >= num_chunks() || bytes.size() != chunk_size(k))
    return error(errc::invalid_argument,
                 "chunk " + std::to_string(k) + " of " + std::to_string(bytes.size()) +
                     " bytes does not fit version " + std::to_string(version_));
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!hashes_[k].empty()) return ok_status();  // held already: servers may be sending it
  }
  // Outside the lock: only this writer touches chunk k until it is marked held below.
  std::memcpy(buffer_->data() + chunk_offset(k), bytes.data(), bytes.size());
  std::lock_guard<std::mutex> g(mu_);
  hashes_[k] = std::move(chunk_hash);
  ++num_held_;
  return ok_status();
}

std::optional<std::string> arriving_version::chunk_hash(uint64_t k) const {
  std::lock_guard<std::mutex> g(mu_);
  if (k >= hashes_.size() || hashes_[k].empty()) return std::nullopt;
  return hashes_[k];
}

uint64_t arriving_version::num_held() const {
  std::lock_guard<std::mutex> g(mu_);
  return num_held_;
}

cached_version arriving_version::to_cached() const {
  cached_version v;
  v.version = version_;
  v.bytes = buffer_;
  v.content_hash = content_hash_;
  v.chunk_bytes = chunk_bytes_;
  {
    std::lock_guard<std::mutex> g(mu_);
    v.chunk_hashes = hashes_;
  }
  v.held_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  return v;
}

void arriving_versions::add(std::shared_ptr<arriving_version> v) {
  std::lock_guard<std::mutex> g(mu_);
  const uint64_t version = v->version();
  arriving_[version] = std::move(v);
}

void arriving_versions::remove(uint64_t version) {
  std::lock_guard<std::mutex> g(mu_);
  arriving_.erase(version);
}

std::shared_ptr<arriving_version> arriving_versions::find(uint64_t version) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = arriving_.find(version);
  return it == arriving_.end() ? nullptr : it->second;
}

std::optional<result<json>> arriving_versions::answer(
    const std::string& verb, uint64_t version, const json& request, uint64_t load,
    std::shared_ptr<const cached_version>* send) const {
  auto a = find(version);
  if (!a) return std::nullopt;
  if (verb == wire::kMeta)
    return result<json>(json{{"version", version},
                             {"bytes", a->num_bytes()},
                             {"content_hash", a->content_hash()},
                             {"chunk_bytes", a->chunk_bytes()},
                             {"num_chunks", a->num_chunks()},
                             {"load", load},
                             {"arriving", true},
                             {"chunks_held", a->num_held()}});
  auto chunk = wire::uint_field(request, "chunk");
  if (!chunk) return result<json>(chunk.err());
  if (*chunk >= a->num_chunks())
    return result<json>(
        error(errc::invalid_argument, "chunk " + std::to_string(*chunk) + " is outside version " +
                                          std::to_string(version) + "'s " +
                                          std::to_string(a->num_chunks()) + " chunks"));
  auto hash = a->chunk_hash(*chunk);
  if (!hash)
    return result<json>(error(errc::not_found, "chunk " + std::to_string(*chunk) + " of version " +
                                                   std::to_string(version) +
                                                   " has not arrived here yet"));
  *send = a->send_view();
  return result<json>(json{{"version", version},
                           {"chunk", *chunk},
                           {"offset", a->chunk_offset(*chunk)},
                           {"chunk_hash", *hash}});
}

}  // namespace moerl::weights
