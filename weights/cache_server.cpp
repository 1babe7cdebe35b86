#include "weights/cache_server.h"

#include <zmq.h>

#include <chrono>
#include <iterator>
#include <string_view>
#include <vector>

#include "common/log.h"
#include "common/status_try.h"
#include "store/digest.h"
#include "weights/wire.h"
#include "zmq/bind.h"
#include "zmq/check.h"
#include "zmq/parts.h"

namespace moerl::weights {
namespace {

using nlohmann::json;

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A put that saw no chunk for this long is abandoned (its pusher died or gave up).
constexpr int64_t kStagedPutTimeoutMs = 30000;
// At most this many versions arriving at once: a pusher sends one at a time.
constexpr size_t kMaxStagedPuts = 2;

// The zero-copy payload: the message keeps the version alive until ZeroMQ sent it.
void release_version(void*, void* hint) {
  delete static_cast<std::shared_ptr<const cached_version>*>(hint);
}

}  // namespace

json server_counters::to_json() const {
  return {{"requests", num_requests},
          {"bad_requests", num_bad_requests},
          {"bytes_served", bytes_served},
          {"versions_put", num_versions_put},
          {"chunks_refused", num_chunks_refused},
          {"shm_copies", num_shm_copies},
          {"fabric_puts", num_fabric_puts},
          {"fabric_puts_failed", num_fabric_puts_failed},
          {"fabric_regions", fabric_regions}};
}

result<std::unique_ptr<cache_server>> cache_server::bind(std::shared_ptr<zmq::zmq_context> ctx,
                                                         const std::string& endpoint,
                                                         std::shared_ptr<version_cache> cache,
                                                         uint64_t chunk_bytes) {
  std::unique_ptr<cache_server> s(new cache_server);
  s->ctx_ = std::move(ctx);
  s->cache_ = std::move(cache);
  s->chunk_bytes_ = chunk_bytes;
  s->sock_ = zmq_socket(s->ctx_->handle(), ZMQ_ROUTER);
  if (!s->sock_)
    return error(errc::io_error,
                 std::string("zmq_socket(ROUTER) failed: ") + zmq_strerror(zmq_errno()));
  constexpr int kHighWaterMark = 1024;
  ASSIGN_OR_RETURN(auto bound, zmq::bind_server_socket(*s->ctx_, s->sock_, endpoint, kHighWaterMark,
                                                       kHighWaterMark));
  s->endpoint_ = bound;
  return s;
}

cache_server::~cache_server() {
  if (sock_) zmq_close(sock_);
}

uint64_t cache_server::load() const {
  const int64_t age = now_ms() - bucket_ms_;
  if (age >= 2000) return 0;
  return age >= 1000 ? bucket_now_ : bucket_now_ + bucket_prev_;
}

void cache_server::count_served(uint64_t n) {
  const int64_t t = now_ms();
  if (t - bucket_ms_ >= 1000) {
    bucket_prev_ = t - bucket_ms_ >= 2000 ? 0 : bucket_now_;
    bucket_now_ = 0;
    bucket_ms_ = t;
  }
  bucket_now_ += n;
  counters_.bytes_served += n;
}

status cache_server::poll(int timeout_ms) {
  zmq_pollitem_t item{sock_, 0, ZMQ_POLLIN, 0};
  int n = 0;
  if (landing_ && landing_->active()) {
    // Fabric puts land only while the cache makes progress (providers progress manually):
    // wait in short slices, progressing between them.
    const int64_t until = now_ms() + timeout_ms;
    for (;;) {
      if (auto st = landing_->progress(); !st)
        logger("weights")->warn("fabric puts: {}", st.err().to_string());
      n = zmq_poll(&item, 1, 1);
      ZMQ_CHECK(n);
      if (n > 0 || now_ms() >= until || !landing_->active()) break;
    }
  } else {
    n = zmq_poll(&item, 1, timeout_ms);
    ZMQ_CHECK(n);
  }
  while (n > 0) {
    if (auto st = serve_one(); !st) return st;
    n = zmq_poll(&item, 1, 0);
    ZMQ_CHECK(n);
  }
  // Abandoned puts free their memory.
  for (auto it = staged_.begin(); it != staged_.end();)
    it = now_ms() - it->second.touched_ms > kStagedPutTimeoutMs ? staged_.erase(it) : std::next(it);
  if (landing_)
    for (uint32_t ticket : landing_->expire()) {
      const auto it = fabric_puts_.find(ticket);
      if (it != fabric_puts_.end())
        logger("weights")->warn(
            "fabric put of version {} shard {} not committed in time: its region is freed",
            it->second.version, it->second.shard);
      free_fabric_put(ticket, true);
    }
  return ok_status();
}

void cache_server::enable_fabric_puts(fabric::transport_options options, int64_t put_timeout_ms) {
  landing_ = std::make_unique<fabric_landing>(std::move(options), put_timeout_ms);
}

std::string cache_server::fabric_provider() const {
  const auto* d = landing_ ? landing_->describe() : nullptr;
  return d ? d->provider : std::string();
}

void cache_server::free_fabric_put(uint32_t ticket, bool failed) {
  if (landing_) landing_->release(ticket);
  if (fabric_puts_.erase(ticket) && failed) ++counters_.num_fabric_puts_failed;
  counters_.fabric_regions = landing_ ? landing_->num_regions() : 0;
}

result<json> cache_server::handle_put_begin(const json& h) {
  if (!landing_)
    return error(errc::invalid_argument,
                 "this cache takes no fabric puts (put_begin); use put (weights.shard_push zmq)");
  ASSIGN_OR_RETURN(auto version, wire::uint_field(h, "version"));
  ASSIGN_OR_RETURN(auto total, wire::uint_field(h, "total_bytes"));
  ASSIGN_OR_RETURN(auto id, wire::shard_fields(h, true));
  if (cache_->find(version, id.shard)) return json{{"received", total}, {"complete", true}};
  if (total == 0 || total > cache_->max_bytes())
    return error(errc::capacity_exceeded, "put_begin of " + std::to_string(total) +
                                              " bytes: a cache of " +
                                              std::to_string(cache_->max_bytes()) +
                                              " bytes holds versions of 1 byte up to that");
  // As many puts at once as ZeroMQ puts: the oldest region goes first.
  while (landing_->num_regions() >= kMaxStagedPuts + id.num_shards - 1)
    free_fabric_put(landing_->oldest(), true);
  ASSIGN_OR_RETURN(auto grant, landing_->begin(total, chunk_bytes_));
  fabric_puts_[grant["ticket"].get<uint32_t>()] = {version, id.shard, id.num_shards};
  counters_.fabric_regions = landing_->num_regions();
  return grant;
}

result<json> cache_server::handle_put_commit(const json& h) {
  if (!landing_) return error(errc::invalid_argument, "this cache takes no fabric puts");
  ASSIGN_OR_RETURN(auto version, wire::uint_field(h, "version"));
  ASSIGN_OR_RETURN(auto ticket64, wire::uint_field(h, "ticket"));
  ASSIGN_OR_RETURN(auto writes, wire::uint_field(h, "writes"));
  ASSIGN_OR_RETURN(auto id, wire::shard_fields(h, true));
  const std::string content_hash = h.value("content_hash", std::string());
  const std::string version_hash = h.value("version_hash", std::string());
  const uint32_t ticket = static_cast<uint32_t>(ticket64);
  const auto it = fabric_puts_.find(ticket);
  if (it == fabric_puts_.end() || ticket64 != ticket)
    return error(errc::not_found, "fabric put " + std::to_string(ticket64) +
                                      " is not in progress here (expired, or never begun)");
  const std::string what = "version " + std::to_string(version) +
                           (id.num_shards > 1 ? " shard " + std::to_string(id.shard) : "");
  if (it->second.version != version || it->second.shard != id.shard ||
      it->second.num_shards != id.num_shards) {
    free_fabric_put(ticket, true);
    return error(errc::invalid_argument,
                 "put_commit of " + what + " names fabric put " + std::to_string(ticket) +
                     ", which was begun for version " + std::to_string(it->second.version) +
                     " shard " + std::to_string(it->second.shard));
  }
  if (content_hash.size() != 64) {
    free_fabric_put(ticket, true);
    return error(errc::invalid_argument, "put_commit needs content_hash (hex sha256)");
  }
  // Every write's immediate counted before a byte is read (fabric/PROTOCOL.md: a counted
  // immediate is the only sign its write was placed). The pusher saw its writes complete
  // before it committed, so they are due; a second bounds the wait.
  constexpr int kLandWaitMs = 1000;
  auto landed = landing_->landed(ticket, writes, kLandWaitMs);
  if (!landed) {
    free_fabric_put(ticket, true);
    return landed.err();
  }
  // Copied out so the region goes back at once (cached versions own their bytes).
  const uint64_t received = landed->size();
  auto bytes = std::make_shared<const std::string>(landed->data(), landed->size());
  free_fabric_put(ticket, false);
  if (auto st = admit(version, id.shard, id.num_shards, std::move(bytes), content_hash,
                      version_hash, what);
      !st) {
    ++counters_.num_fabric_puts_failed;
    return st.err();
  }
  ++counters_.num_fabric_puts;
  return json{{"received", received}, {"complete", true}};
}

status cache_server::admit(uint64_t version, uint32_t shard, uint32_t num_shards,
                           std::shared_ptr<const std::string> bytes,
                           const std::string& content_hash, const std::string& version_hash,
                           const std::string& what) {
  auto cv = make_cached_version(version, std::move(bytes), chunk_bytes_);
  if (cv.content_hash != content_hash)
    // Not the chunk code: resending a chunk cannot help, the pusher named the wrong hash.
    return error(errc::invalid_argument,
                 what + " arrived whole but does not match its content hash");
  cv.shard = shard;
  cv.num_shards = num_shards;
  cv.version_hash = version_hash;
  if (auto st = cache_->insert(std::move(cv)); !st) return st.err();
  ++counters_.num_versions_put;
  return ok_status();
}

status cache_server::serve_one() {
  auto parts = zmq::recv_message_parts(sock_, "zmq_msg_recv(ROUTER)");
  if (!parts) return parts.err().code == errc::capacity_exceeded ? ok_status() : parts.err();
  ++counters_.num_requests;
  // [identity][verb][header][payload?]
  const std::string identity = parts->empty() ? std::string() : (*parts)[0];
  std::shared_ptr<const cached_version> send;
  json header;
  uint64_t rid = 0;
  result<json> answer = error(errc::malformed_message, "");
  if (parts->size() < 3 || parts->size() > 4) {
    answer = error(errc::malformed_message,
                   "a request has 2 or 3 parts (verb, header[, payload]), got " +
                       std::to_string(parts->size() - 1));
  } else {
    header = json::parse((*parts)[2], nullptr, false);
    if (!header.is_object()) {
      answer = error(errc::malformed_message, "request header is not a JSON object");
    } else {
      rid = header.value("rid", uint64_t{0});
      answer = handle((*parts)[1], header, parts->size() == 4 ? (*parts)[3] : std::string(), &send);
    }
  }
  const bool ok = static_cast<bool>(answer);
  if (!ok) {
    ++counters_.num_bad_requests;
    logger("weights")->debug("refused a request: {}", answer.err().to_string());
  }
  json out = ok ? *answer : wire::error_header(rid, answer.err());
  out["rid"] = rid;
  const std::string status_word = ok ? wire::kOk : wire::kError;
  const std::string text = out.dump();
  const bool with_payload = ok && send;
  ZMQ_CHECK(zmq_send(sock_, identity.data(), identity.size(), ZMQ_SNDMORE));
  ZMQ_CHECK(zmq_send(sock_, status_word.data(), status_word.size(), ZMQ_SNDMORE));
  ZMQ_CHECK(zmq_send(sock_, text.data(), text.size(), with_payload ? ZMQ_SNDMORE : 0));
  if (with_payload) {
    const uint64_t k = out["chunk"].get<uint64_t>();
    const uint64_t size = send->chunk_size(k);
    auto* keep = new std::shared_ptr<const cached_version>(send);
    zmq_msg_t msg;
    zmq_msg_init_data(&msg, const_cast<char*>(send->bytes->data() + send->chunk_offset(k)), size,
                      release_version, keep);
    if (zmq_msg_send(&msg, sock_, 0) == -1) {
      const int e = zmq_errno();
      zmq_msg_close(&msg);
      return zmq::detail::zmq_failure("zmq_msg_send(ROUTER)", e, __FILE__, __LINE__);
    }
    count_served(size);
  }
  return ok_status();
}

result<json> cache_server::handle(const std::string& verb, const json& h,
                                  const std::string& payload,
                                  std::shared_ptr<const cached_version>* send) {
  if (verb == wire::kLoad) return json{{"load", load()}, {"versions", cache_->versions()}};
  if (verb == wire::kPut) return handle_put(h, payload);
  if (verb == wire::kPutBegin) return handle_put_begin(h);
  if (verb == wire::kPutCommit) return handle_put_commit(h);
  if (verb != wire::kMeta && verb != wire::kGet)
    return error(errc::unknown_command, "unknown request '" + verb.substr(0, 32) +
                                            "' (meta, get, put, put_begin, put_commit, load)");
  ASSIGN_OR_RETURN(auto version, wire::uint_field(h, "version"));
  ASSIGN_OR_RETURN(auto id, wire::shard_fields(h, false));
  auto found = cache_->find(version, id.shard);
  // Peers serve whole versions only (the trainer does not shard when weights.fanout is on).
  if (!found && arriving_ && id.shard == 0)
    if (auto a = arriving_->answer(verb, version, h, load(), send)) return std::move(*a);
  ASSIGN_OR_RETURN(auto v, std::move(found));
  const auto& cv = *v;
  if (verb == wire::kMeta) {
    json meta{{"version", cv.version},
              {"bytes", cv.bytes->size()},
              {"content_hash", cv.content_hash},
              {"chunk_bytes", cv.chunk_bytes},
              {"num_chunks", cv.num_chunks()},
              {"load", load()},
              {"shard", cv.shard},
              {"num_shards", cv.num_shards}};
    if (!cv.version_hash.empty()) meta["version_hash"] = cv.version_hash;
    if (const shm_copy* copy = shm_copy_for(cv, h)) {
      meta["shm_path"] = copy->path();
      meta["shm_inode"] = copy->inode();
    }
    return meta;
  }
  ASSIGN_OR_RETURN(auto chunk, wire::uint_field(h, "chunk"));
  if (chunk >= cv.num_chunks())
    return error(errc::invalid_argument, "chunk " + std::to_string(chunk) + " is outside version " +
                                             std::to_string(cv.version) + "'s " +
                                             std::to_string(cv.num_chunks()) + " chunks");
  *send = v;
  return json{{"version", cv.version},
              {"shard", cv.shard},
              {"chunk", chunk},
              {"offset", cv.chunk_offset(chunk)},
              {"chunk_hash", cv.chunk_hashes[chunk]}};
}

void cache_server::enable_same_host_shm(bool on) {
  shm_host_ = on ? same_host_identity() : std::string();
  if (!on) shm_.clear();
}

const shm_copy* cache_server::shm_copy_for(const cached_version& cv, const json& request) {
  if (shm_host_.empty() || request.value("host", std::string()) != shm_host_) return nullptr;
  // One version's copies at a time (every shard of a sharded one): the older go first.
  if (!shm_.empty() && shm_.begin()->second->version() != cv.version) shm_.clear();
  auto& copy = shm_[cv.shard];
  if (!copy) {
    auto made = shm_copy::publish(cv.version, *cv.bytes, cv.num_shards > 1, cv.shard);
    if (!made) {
      shm_.erase(cv.shard);
      logger("weights")->warn("same-host copy of version {} shard {}: {}; readers get chunks",
                              cv.version, cv.shard, made.err().to_string());
      return nullptr;
    }
    copy = std::move(*made);
    ++counters_.num_shm_copies;
  }
  return copy.get();
}

result<json> cache_server::handle_put(const json& h, const std::string& payload) {
  ASSIGN_OR_RETURN(auto version, wire::uint_field(h, "version"));
  ASSIGN_OR_RETURN(auto offset, wire::uint_field(h, "offset"));
  ASSIGN_OR_RETURN(auto total, wire::uint_field(h, "total_bytes"));
  ASSIGN_OR_RETURN(auto id, wire::shard_fields(h, true));
  const std::string content_hash = h.value("content_hash", std::string());
  const std::string chunk_hash = h.value("chunk_hash", std::string());
  const std::string version_hash = h.value("version_hash", std::string());
  const std::string what = "version " + std::to_string(version) +
                           (id.num_shards > 1 ? " shard " + std::to_string(id.shard) : "");
  if (content_hash.size() != 64 || chunk_hash.size() != 64)
    return error(errc::invalid_argument, "put needs content_hash and chunk_hash (hex sha256)");
  if (cache_->find(version, id.shard)) return json{{"received", total}, {"complete", true}};
  if (offset > total || payload.size() > total - offset || payload.empty())
    return error(errc::invalid_argument, "put range [" + std::to_string(offset) + ", " +
                                             std::to_string(offset + payload.size()) +
                                             ") is outside a version of " + std::to_string(total) +
                                             " bytes");
  if (store::sha256_hex(payload) != chunk_hash) {
    ++counters_.num_chunks_refused;
    return error(errc::malformed_message, "put chunk at offset " + std::to_string(offset) + " of " +
                                              what + " does not match its chunk hash");
  }
  const auto key = std::make_pair(version, id.shard);
  auto it = staged_.find(key);
  if (it == staged_.end()) {
    // The oldest put goes first; a sharded version's shards may arrive from several pushers.
    if (staged_.size() >= kMaxStagedPuts + id.num_shards - 1) staged_.erase(staged_.begin());
    staged_put p;
    p.total_bytes = total;
    p.content_hash = content_hash;
    p.num_shards = id.num_shards;
    p.bytes.assign(total, '\0');
    it = staged_.emplace(key, std::move(p)).first;
  }
  staged_put& p = it->second;
  if (p.total_bytes != total || p.content_hash != content_hash || p.num_shards != id.num_shards)
    return error(errc::invalid_argument,
                 "put of " + what + " changed its size, content hash or shard count mid-way");
  p.touched_ms = now_ms();
  if (p.offsets.insert(offset).second) {
    p.bytes.replace(offset, payload.size(), payload);
    p.received += payload.size();
  }
  if (p.received < p.total_bytes) return json{{"received", p.received}, {"complete", false}};
  auto bytes = std::make_shared<const std::string>(std::move(p.bytes));
  staged_.erase(it);
  if (auto st = admit(version, id.shard, id.num_shards, std::move(bytes), content_hash,
                      version_hash, what);
      !st)
    return st.err();
  return json{{"received", total}, {"complete", true}};
}

}  // namespace moerl::weights
