#include "weights/fanout_reader.h"

#include <chrono>
#include <thread>

#include "common/log.h"
#include "store/digest.h"
#include "weights/wire.h"

namespace moerl::weights {
namespace {

using nlohmann::json;
using steady = std::chrono::steady_clock;

// A chunk the source has not received yet is asked for again after this. Short against a
// chunk's transfer time, so a child trails its parent by about one chunk.
constexpr auto kNotYetRetry = std::chrono::milliseconds(2);

int64_t ms_since(steady::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t).count();
}

}  // namespace

fanout_reader::fanout_reader(std::shared_ptr<zmq::zmq_context> ctx,
                             std::shared_ptr<peer_server> self, int timeout_ms, int stall_ms)
    : ctx_(std::move(ctx)), self_(std::move(self)), timeout_ms_(timeout_ms), stall_ms_(stall_ms) {}

cache_client* fanout_reader::connection(const std::string& endpoint) {
  auto it = connections_.find(endpoint);
  if (it != connections_.end()) return it->second.get();
  auto made = cache_client::connect(ctx_, endpoint, timeout_ms_);
  if (!made) {
    logger("weights")->warn("connect to {}: {}", endpoint, made.err().to_string());
    return nullptr;
  }
  return connections_.emplace(endpoint, std::move(*made)).first->second.get();
}

result<fanout_reader::meta> fanout_reader::ask_meta(const fanout_source& src, uint64_t version) {
  const auto start = steady::now();
  for (;;) {
    auto* c = connection(src.endpoint);
    if (!c) return error(errc::io_error, "cannot connect to " + src.endpoint);
    auto a = c->call(wire::kMeta, json{{"version", version}});
    if (a) {
      meta m;
      m.bytes = a->header.value("bytes", uint64_t{0});
      m.chunk_bytes = a->header.value("chunk_bytes", uint64_t{0});
      m.num_chunks = a->header.value("num_chunks", uint64_t{0});
      m.content_hash = a->header.value("content_hash", std::string());
      if (m.chunk_bytes == 0 || m.content_hash.empty() ||
          m.num_chunks != (m.bytes + m.chunk_bytes - 1) / m.chunk_bytes)
        return error(errc::malformed_message, src.endpoint + " answered an inconsistent meta");
      m.num_shards = a->header.value("num_shards", uint64_t{1});
      if (m.num_shards == 0)
        return error(errc::malformed_message, src.endpoint + " answered a meta of 0 shards");
      return m;
    }
    // A dead or confused holder gets a fresh socket next time; one without the version keeps it.
    if (a.err().code != errc::not_found) connections_.erase(src.endpoint);
    if (!src.peer || a.err().code != errc::not_found || ms_since(start) >= stall_ms_)
      return a.err();
    std::this_thread::sleep_for(kNotYetRetry);
  }
}

bool fanout_reader::read_from(const fanout_source& src, arriving_version& into) {
  auto log = logger("weights");
  const uint64_t version = into.version();
  auto progress = steady::now();
  int mismatches = 0;
  for (uint64_t k = into.num_held(); k < into.num_chunks();) {
    auto* c = connection(src.endpoint);
    if (!c) return false;
    auto a = c->call(wire::kGet, json{{"version", version}, {"chunk", k}});
    if (!a) {
      if (src.peer && a.err().code == errc::not_found && ms_since(progress) < stall_ms_) {
        std::this_thread::sleep_for(kNotYetRetry);  // the peer has not received chunk k yet
        continue;
      }
      log->warn("version {} chunk {} from {}: {}", version, k, src.endpoint, a.err().to_string());
      if (a.err().code != errc::not_found) connections_.erase(src.endpoint);
      return false;
    }
    const std::string hash = a->header.value("chunk_hash", std::string());
    if (a->header.value("offset", ~uint64_t{0}) != into.chunk_offset(k) ||
        a->payload.size() != into.chunk_size(k) || store::sha256_hex(a->payload) != hash) {
      ++counters_.num_chunk_refetches;
      log->warn("version {} chunk {} from {} does not match its hash: fetching again", version, k,
                src.endpoint);
      if (++mismatches > 1) return false;
      continue;
    }
    if (auto st = into.put_chunk(k, a->payload, hash); !st) return false;  // sizes checked above
    (src.peer ? counters_.bytes_from_peer : counters_.bytes_from_cache) += a->payload.size();
    if (on_chunk_) on_chunk_(k, into.num_chunks());
    mismatches = 0;
    progress = steady::now();
    ++k;
  }
  return true;
}

void fanout_reader::serve_whole(cached_version v) {
  if (!self_) return;
  const uint64_t version = v.version;
  if (auto st = self_->held().insert(std::move(v)); !st)
    logger("weights")->warn("version {}: not served whole: {}", version, st.err().to_string());
}

result<fetched_version> fanout_reader::fetch(
    uint64_t version, const std::vector<fanout_source>& sources,
    const std::function<result<std::string>()>& from_store) {
  auto log = logger("weights");
  if (self_)
    if (auto held = self_->held().find(version)) return fetched_version{(*held)->bytes, "held", ""};
  const uint64_t peer_before = counters_.bytes_from_peer;
  std::shared_ptr<arriving_version> arriving;
  bool read_any = false;
  for (const auto& src : sources) {
    auto m = ask_meta(src, version);
    if (!m) continue;
    if (m->num_shards > 1) {
      // Readers serve whole versions only, so shards come from the caches. The sharded reader
      // asks every cache for every shard: one try covers the caches left in `sources`.
      if (src.peer || !sharded_) {
        log->warn("version {}: {} holds it in {} shards and {}", version, src.endpoint,
                  m->num_shards,
                  src.peer ? "a peer should hold it whole" : "this reader cannot assemble them");
        continue;
      }
      auto whole = sharded_(version);
      if (!whole) {
        log->warn("version {}: its shards from the caches: {}", version, whole.err().to_string());
        break;
      }
      serve_whole(make_cached_version(version, whole->bytes, m->chunk_bytes));
      if (self_ && arriving) self_->arriving().remove(version);  // a peer failed mid-version
      return whole;
    }
    if (!arriving) {
      arriving =
          std::make_shared<arriving_version>(version, m->bytes, m->content_hash, m->chunk_bytes);
      if (self_) self_->arriving().add(arriving);
    } else if (m->content_hash != arriving->content_hash() ||
               m->chunk_bytes != arriving->chunk_bytes() || m->bytes != arriving->num_bytes()) {
      continue;  // a resume continues only on the same content, split the same way
    }
    if (read_any) {
      ++counters_.num_failovers;
      log->info("version {}: resuming at chunk {} from {}", version, arriving->num_held(),
                src.endpoint);
    }
    read_any = true;
    if (read_from(src, *arriving)) break;
  }
  if (arriving && arriving->complete()) {
    if (store::sha256_hex(*arriving->bytes()) == arriving->content_hash()) {
      if (self_) {
        // Held whole before it stops arriving, so a peer never finds it in neither.
        serve_whole(arriving->to_cached());
        self_->arriving().remove(version);
      }
      ++counters_.num_versions;
      const bool from_peer = counters_.bytes_from_peer > peer_before;
      return fetched_version{arriving->bytes(), from_peer ? "peer" : "cache", "zmq"};
    }
    log->error("version {} does not match its content hash", version);
  }
  if (self_) self_->arriving().remove(version);
  if (!from_store)
    return error(errc::not_found, "none of " + std::to_string(sources.size()) +
                                      " holders served version " + std::to_string(version));
  log->info("version {}: no holder could serve it ({} asked): reading the store", version,
            sources.size());
  return read_store_copy(from_store, counters_);
}

}  // namespace moerl::weights
