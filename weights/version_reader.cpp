#include "weights/version_reader.h"

#include <algorithm>

#include "common/host_identity.h"
#include "common/log.h"
#include "common/status_try.h"
#include "store/digest.h"
#include "weights/shm_copy.h"
#include "weights/wire.h"

namespace moerl::weights {

using nlohmann::json;

json reader_counters::bytes_from_json() const {
  return {{"cache", bytes_from_cache}, {"peer", bytes_from_peer}, {"store", bytes_from_store}};
}

json reader_counters::to_json() const {
  return {{"bytes_from", bytes_from_json()},
          {"versions", num_versions},
          {"failovers", num_failovers},
          {"chunk_refetches", num_chunk_refetches},
          {"store_fallbacks", num_store_fallbacks},
          {"bytes_via_shm", bytes_via_shm}};
}

version_reader::version_reader(std::shared_ptr<zmq::zmq_context> ctx, int timeout_ms,
                               bool same_host_shm)
    : ctx_(std::move(ctx)),
      timeout_ms_(timeout_ms),
      shm_host_(same_host_shm ? host_identity({"net", "mnt"}) : std::string()) {}

cache_client* version_reader::client(const std::string& endpoint) {
  auto& c = clients_[endpoint];
  if (!c) {
    auto made = cache_client::connect(ctx_, endpoint, timeout_ms_);
    if (!made) {
      logger("weights")->warn("connect to cache {}: {}", endpoint, made.err().to_string());
      clients_.erase(endpoint);
      return nullptr;
    }
    c = std::move(*made);
  }
  return c.get();
}

void version_reader::drop(const std::string& endpoint) { clients_.erase(endpoint); }

std::vector<version_reader::holder> version_reader::holders(
    uint64_t version, const std::vector<std::string>& caches) {
  std::vector<holder> out;
  for (const auto& ep : caches) {
    auto* c = client(ep);
    if (!c) continue;
    json meta{{"version", version}};
    if (!shm_host_.empty()) meta["host"] = shm_host_;
    auto a = c->call(wire::kMeta, meta);
    if (!a) {
      if (a.err().code != errc::not_found) drop(ep);  // dead or confused: a fresh socket next time
      continue;
    }
    holder h;
    h.endpoint = ep;
    h.load = a->header.value("load", uint64_t{0});
    h.bytes = a->header.value("bytes", uint64_t{0});
    h.chunk_bytes = a->header.value("chunk_bytes", uint64_t{0});
    h.num_chunks = a->header.value("num_chunks", uint64_t{0});
    h.content_hash = a->header.value("content_hash", std::string());
    h.shm_path = a->header.value("shm_path", std::string());
    if (h.chunk_bytes == 0 || h.content_hash.empty()) continue;
    out.push_back(std::move(h));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const holder& a, const holder& b) { return a.load < b.load; });
  return out;
}

bool version_reader::read_chunks(const holder& h, uint64_t version, std::string& out,
                                 uint64_t* next) {
  auto log = logger("weights");
  for (; *next < h.num_chunks; ++*next) {
    bool got = false;
    for (int attempt = 0; attempt < 2 && !got; ++attempt) {
      auto* c = client(h.endpoint);
      if (!c) return false;
      auto a = c->call(wire::kGet, json{{"version", version}, {"chunk", *next}});
      if (!a) {
        log->warn("version {} chunk {} from cache {}: {}", version, *next, h.endpoint,
                  a.err().to_string());
        drop(h.endpoint);
        return false;
      }
      const uint64_t off = a->header.value("offset", uint64_t{0});
      if (off != *next * h.chunk_bytes || off + a->payload.size() > out.size() ||
          store::sha256_hex(a->payload) != a->header.value("chunk_hash", std::string())) {
        ++counters_.num_chunk_refetches;
        log->warn("version {} chunk {} from cache {} does not match its hash: fetching again",
                  version, *next, h.endpoint);
        continue;
      }
      out.replace(off, a->payload.size(), a->payload);
      counters_.bytes_from_cache += a->payload.size();
      got = true;
    }
    if (!got) return false;
  }
  return true;
}

std::optional<std::string> version_reader::read_same_host_copy(const std::vector<holder>& hs,
                                                               uint64_t version) {
  for (const holder& h : hs) {
    if (h.shm_path.empty()) continue;
    auto bytes = read_shm_copy(h.shm_path, h.bytes);
    if (bytes && store::sha256_hex(*bytes) == h.content_hash) {
      counters_.bytes_from_cache += bytes->size();
      counters_.bytes_via_shm += bytes->size();
      return std::move(*bytes);
    }
    logger("weights")->warn(
        "version {}: same-host copy {} from cache {} unusable ({}); reading chunks", version,
        h.shm_path, h.endpoint,
        bytes ? "does not match its content hash" : bytes.err().to_string());
  }
  return std::nullopt;
}

result<fetched_version> version_reader::fetch(
    uint64_t version, const std::vector<std::string>& caches,
    const std::function<result<std::string>()>& from_store) {
  auto log = logger("weights");
  auto hs = holders(version, caches);
  if (auto same_host = read_same_host_copy(hs, version)) {
    ++counters_.num_versions;
    return fetched_version{std::make_shared<const std::string>(std::move(*same_host)), "cache",
                           "shm"};
  }
  std::string bytes, content_hash;
  uint64_t next = 0, chunk_bytes = 0;
  bool complete = false;
  for (size_t i = 0; i < hs.size() && !complete; ++i) {
    const holder& h = hs[i];
    // A resume continues only on a cache that splits the same content the same way.
    if (next > 0 && (h.content_hash != content_hash || h.chunk_bytes != chunk_bytes)) continue;
    if (next == 0) {
      bytes.assign(h.bytes, '\0');
      content_hash = h.content_hash;
      chunk_bytes = h.chunk_bytes;
    } else {
      ++counters_.num_failovers;
      log->info("version {}: resuming at chunk {} from cache {}", version, next, h.endpoint);
    }
    complete = read_chunks(h, version, bytes, &next);
  }
  if (complete && store::sha256_hex(bytes) == content_hash) {
    ++counters_.num_versions;
    return fetched_version{std::make_shared<const std::string>(std::move(bytes)), "cache", "zmq"};
  }
  if (complete) log->error("version {} from the caches does not match its content hash", version);
  if (!from_store)
    return error(errc::not_found, "no cache of " + std::to_string(caches.size()) +
                                      " served version " + std::to_string(version));
  // Bytes already read from a cache stay counted: they crossed the network all the same.
  log->info("version {}: no cache could serve it ({} asked, {} held it): reading the store",
            version, caches.size(), hs.size());
  return read_store_copy(from_store, counters_);
}

result<fetched_version> read_store_copy(const std::function<result<std::string>()>& from_store,
                                        reader_counters& c) {
  ASSIGN_OR_RETURN(auto s, from_store());
  ++c.num_store_fallbacks;
  ++c.num_versions;
  c.bytes_from_store += s.size();
  return fetched_version{std::make_shared<const std::string>(std::move(s)), "store", "store"};
}

}  // namespace moerl::weights
