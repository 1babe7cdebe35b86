#include "weights/version_reader.h"

#include <algorithm>
#include <thread>

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

reader_counters& reader_counters::operator+=(const reader_counters& o) {
  bytes_from_cache += o.bytes_from_cache;
  bytes_from_peer += o.bytes_from_peer;
  bytes_from_store += o.bytes_from_store;
  num_versions += o.num_versions;
  num_failovers += o.num_failovers;
  num_chunk_refetches += o.num_chunk_refetches;
  num_store_fallbacks += o.num_store_fallbacks;
  bytes_via_shm += o.bytes_via_shm;
  bytes_via_sealed_shm += o.bytes_via_sealed_shm;
  num_sharded_versions += o.num_sharded_versions;
  num_shards_read += o.num_shards_read;
  return *this;
}

json reader_counters::to_json() const {
  return {{"bytes_from", bytes_from_json()},
          {"versions", num_versions},
          {"failovers", num_failovers},
          {"chunk_refetches", num_chunk_refetches},
          {"store_fallbacks", num_store_fallbacks},
          {"bytes_via_shm", bytes_via_shm},
          {"bytes_via_sealed_shm", bytes_via_sealed_shm},
          {"sharded_versions", num_sharded_versions},
          {"shards_read", num_shards_read}};
}

version_reader::version_reader(std::shared_ptr<zmq::zmq_context> ctx, int timeout_ms,
                               bool same_host_shm)
    : ctx_(std::move(ctx)),
      timeout_ms_(timeout_ms),
      same_host_shm_(same_host_shm),
      shm_host_(same_host_shm ? same_host_identity() : std::string()),
      connections_(ctx_, timeout_ms) {}

cache_client* version_reader::client(const std::string& endpoint) {
  auto c = connections_.connection(endpoint);
  if (!c) {
    logger("weights")->warn("connect to cache {}: {}", endpoint, c.err().to_string());
    return nullptr;
  }
  return *c;
}

void version_reader::drop(const std::string& endpoint) { connections_.drop(endpoint); }

std::vector<version_reader::holder> version_reader::holders(
    uint64_t version, uint32_t shard, const std::vector<std::string>& caches) {
  std::vector<holder> out;
  for (const auto& ep : caches) {
    auto* c = client(ep);
    if (!c) continue;
    json meta{{"version", version}};
    if (shard > 0) meta["shard"] = shard;
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
    h.shm_inode = a->header.value("shm_inode", uint64_t{0});
    h.shard = static_cast<uint32_t>(a->header.value("shard", uint64_t{0}));
    h.num_shards = static_cast<uint32_t>(a->header.value("num_shards", uint64_t{1}));
    h.version_hash = a->header.value("version_hash", std::string());
    if (h.chunk_bytes == 0 || h.content_hash.empty() || h.shard != shard || h.num_shards == 0)
      continue;
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
      json get{{"version", version}, {"chunk", *next}};
      if (h.shard > 0) get["shard"] = h.shard;
      auto a = c->call(wire::kGet, get);
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
        log->warn(
            "version {} shard {} chunk {} from cache {} does not match its hash: fetching "
            "again",
            version, h.shard, *next, h.endpoint);
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
    auto copy = read_shm_copy(h.shm_path, h.bytes, h.shm_inode);
    // A sealed copy holds the bytes the cache verified before it sealed them (PROTOCOL.md,
    // "The same-host path"): hashing them again would only cost ~0.2 s per 64 MiB and core.
    // Anything else (an older cache's /dev/shm file) is checked whole, as chunks are.
    const bool usable = copy && (copy->sealed || store::sha256_hex(copy->bytes) == h.content_hash);
    if (usable) {
      counters_.bytes_from_cache += copy->bytes.size();
      counters_.bytes_via_shm += copy->bytes.size();
      if (copy->sealed) counters_.bytes_via_sealed_shm += copy->bytes.size();
      return std::move(copy->bytes);
    }
    logger("weights")->warn(
        "version {}: same-host copy {} from cache {} unusable ({}); reading chunks", version,
        h.shm_path, h.endpoint, copy ? "does not match its content hash" : copy.err().to_string());
  }
  return std::nullopt;
}

result<fetched_shard> version_reader::read_entry(uint64_t version, uint32_t shard,
                                                 const std::vector<holder>& hs, size_t num_caches) {
  auto log = logger("weights");
  const std::string what =
      "version " + std::to_string(version) + (shard ? " shard " + std::to_string(shard) : "");
  auto entry = [&](const holder& h, std::string bytes, const char* transport) {
    return fetched_shard{
        h.shard,        h.num_shards,   std::make_shared<const std::string>(std::move(bytes)),
        h.content_hash, h.version_hash, transport};
  };
  for (const holder& h : hs)
    if (!h.shm_path.empty())
      if (auto same_host = read_same_host_copy({h}, version))
        return entry(h, std::move(*same_host), "shm");
  std::string bytes;
  const holder* from = nullptr;
  uint64_t next = 0;
  for (size_t i = 0; i < hs.size(); ++i) {
    const holder& h = hs[i];
    // A resume continues only on a cache that splits the same content the same way.
    if (next > 0 && (h.content_hash != from->content_hash || h.chunk_bytes != from->chunk_bytes))
      continue;
    if (next == 0) {
      bytes.assign(h.bytes, '\0');
      from = &h;
    } else {
      ++counters_.num_failovers;
      log->info("{}: resuming at chunk {} from cache {}", what, next, h.endpoint);
    }
    if (!read_chunks(h, version, bytes, &next)) continue;
    if (store::sha256_hex(bytes) == from->content_hash)
      return entry(*from, std::move(bytes), "zmq");
    // Every chunk matched its hash but the whole does not match the content hash the cache
    // named: that cache's copy is wrong. Never handed out; the next holder reads it afresh.
    log->error("{} from cache {} does not match its content hash: reading it elsewhere", what,
               from->endpoint);
    next = 0;
  }
  return error(errc::not_found, "no cache of " + std::to_string(num_caches) + " served " + what +
                                    " whole and matching its sha256 (" + std::to_string(hs.size()) +
                                    " held it)");
}

result<std::vector<fetched_shard>> version_reader::fetch_shards(
    uint64_t version, const std::vector<std::string>& caches) {
  const auto hs = holders(version, 0, caches);
  const uint32_t n = hs.empty() ? 1 : hs.front().num_shards;
  std::vector<result<fetched_shard>> got(n, error(errc::not_found, ""));
  std::vector<reader_counters> theirs(n);
  // Shards 1.. on their own threads, each with its own reader (sockets are per thread).
  while (shard_readers_.size() + 1 < n)
    shard_readers_.push_back(std::make_unique<version_reader>(ctx_, timeout_ms_, same_host_shm_));
  std::vector<std::thread> threads;
  for (uint32_t k = 1; k < n; ++k)
    threads.emplace_back([&, k] {
      version_reader& r = *shard_readers_[k - 1];
      const reader_counters before = r.counters();
      got[k] = r.read_entry(version, k, r.holders(version, k, caches), caches.size());
      const reader_counters& after = r.counters();
      theirs[k].bytes_from_cache = after.bytes_from_cache - before.bytes_from_cache;
      theirs[k].bytes_via_shm = after.bytes_via_shm - before.bytes_via_shm;
      theirs[k].bytes_via_sealed_shm = after.bytes_via_sealed_shm - before.bytes_via_sealed_shm;
      theirs[k].num_failovers = after.num_failovers - before.num_failovers;
      theirs[k].num_chunk_refetches = after.num_chunk_refetches - before.num_chunk_refetches;
    });
  got[0] = hs.empty() ? result<fetched_shard>(
                            error(errc::not_found, "no cache of " + std::to_string(caches.size()) +
                                                       " holds version " + std::to_string(version)))
                      : read_entry(version, 0, hs, caches.size());
  for (auto& t : threads) t.join();
  for (const auto& c : theirs) counters_ += c;
  std::vector<fetched_shard> out;
  for (uint32_t k = 0; k < n; ++k) {
    if (!got[k]) return got[k].err();
    if (got[k]->num_shards != n)
      return error(errc::malformed_message, "version " + std::to_string(version) + " shard " +
                                                std::to_string(k) + " names " +
                                                std::to_string(got[k]->num_shards) +
                                                " shards, shard 0 " + std::to_string(n));
    out.push_back(std::move(*got[k]));
  }
  return out;
}

result<fetched_version> version_reader::fetch(
    uint64_t version, const std::vector<std::string>& caches,
    const std::function<result<std::string>()>& from_store) {
  auto log = logger("weights");
  auto shards = fetch_shards(version, caches);
  if (shards && shards->size() == 1) {
    ++counters_.num_versions;
    return fetched_version{std::move(shards->front().bytes), "cache", shards->front().transport};
  }
  error why =
      shards ? error(errc::invalid_argument, "version " + std::to_string(version) +
                                                 " is sharded (" + std::to_string(shards->size()) +
                                                 " shards) and this reader cannot assemble it")
             : shards.err();
  if (shards && assembler_) {
    auto whole = assembler_(*shards, shards->front().version_hash);
    if (whole) {
      ++counters_.num_versions;
      ++counters_.num_sharded_versions;
      counters_.num_shards_read += shards->size();
      return fetched_version{std::make_shared<const std::string>(std::move(*whole)), "cache",
                             "zmq"};
    }
    why = whole.err();
    log->error("version {}: its {} shards do not assemble: {}", version, shards->size(),
               why.to_string());
  }
  if (!from_store) return why;
  // Bytes already read from a cache stay counted: they crossed the network all the same.
  log->info("version {}: not from the caches ({} asked: {}): reading the store", version,
            caches.size(), why.message);
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
