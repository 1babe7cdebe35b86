#include "weights/cache_client.h"

#include <zmq.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "common/log.h"
#include "common/status_try.h"
#include "store/digest.h"
#include "weights/fabric_push.h"
#include "weights/wire.h"
#include "zmq/check.h"
#include "zmq/parts.h"

namespace moerl::weights {

using nlohmann::json;

result<std::unique_ptr<cache_client>> cache_client::connect(std::shared_ptr<zmq::zmq_context> ctx,
                                                            const std::string& endpoint,
                                                            int timeout_ms) {
  std::unique_ptr<cache_client> c(new cache_client);
  c->ctx_ = std::move(ctx);
  c->endpoint_ = endpoint;
  c->timeout_ms_ = timeout_ms;
  c->sock_ = zmq_socket(c->ctx_->handle(), ZMQ_DEALER);
  if (!c->sock_)
    return error(errc::io_error,
                 std::string("zmq_socket(DEALER) failed: ") + zmq_strerror(zmq_errno()));
  auto init = [&]() -> status {
    int linger = 0;
    ZMQ_CHECK(zmq_setsockopt(c->sock_, ZMQ_LINGER, &linger, sizeof linger));
    ZMQ_CHECK(zmq_setsockopt(c->sock_, ZMQ_SNDTIMEO, &timeout_ms, sizeof timeout_ms));
    STATUS_TRY(c->ctx_->secure_client(c->sock_));
    ZMQ_CHECK(zmq_connect(c->sock_, endpoint.c_str()));
    return ok_status();
  };
  if (auto st = init(); !st) return st.err();
  return c;
}

cache_client::~cache_client() {
  if (sock_) zmq_close(sock_);
}

result<cache_answer> cache_client::call(const std::string& verb, json header,
                                        std::string_view payload) {
  const uint64_t rid = next_rid_++;
  header["rid"] = rid;
  const std::string text = header.dump();
  ZMQ_CHECK(zmq_send(sock_, verb.data(), verb.size(), ZMQ_SNDMORE));
  ZMQ_CHECK(zmq_send(sock_, text.data(), text.size(), payload.empty() ? 0 : ZMQ_SNDMORE));
  if (!payload.empty()) ZMQ_CHECK(zmq_send(sock_, payload.data(), payload.size(), 0));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) break;
    zmq_pollitem_t item{sock_, 0, ZMQ_POLLIN, 0};
    const int n = zmq_poll(&item, 1, static_cast<long>(left));
    ZMQ_CHECK(n);
    if (n == 0) break;
    ASSIGN_OR_RETURN(auto received, zmq::recv_message_parts(sock_, "zmq_msg_recv(DEALER)"));
    std::vector<std::string>& parts = received;
    if (parts.size() < 2 || parts.size() > 3)
      return error(errc::malformed_message, "cache " + endpoint_ + " answered with " +
                                                std::to_string(parts.size()) + " parts");
    auto h = json::parse(parts[1], nullptr, false);
    if (!h.is_object())
      return error(errc::malformed_message, "cache " + endpoint_ + " answered a non-JSON header");
    if (h.value("rid", uint64_t{0}) != rid) continue;  // the answer to a request given up on
    if (parts[0] == wire::kError) return wire::error_of(h);
    if (parts[0] != wire::kOk)
      return error(errc::malformed_message,
                   "cache " + endpoint_ + " answered status '" + parts[0].substr(0, 16) + "'");
    cache_answer a;
    a.header = std::move(h);
    if (parts.size() == 3) a.payload = std::move(parts[2]);
    return a;
  }
  return error(errc::timeout, "cache " + endpoint_ + " did not answer '" + verb + "' within " +
                                  std::to_string(timeout_ms_) + " ms");
}

nlohmann::json shard_header(uint64_t version, const shard_tag& tag) {
  json h{{"version", version}};
  if (tag.num_shards > 1) {
    h["shard"] = tag.shard;
    h["num_shards"] = tag.num_shards;
  }
  return h;
}

std::string shard_what(uint64_t version, const shard_tag& tag) {
  return "version " + std::to_string(version) +
         (tag.num_shards > 1 ? " shard " + std::to_string(tag.shard) : std::string());
}

status push_version(cache_client& cache, uint64_t version, const std::string& bytes,
                    const std::string& content_hash, uint64_t chunk_bytes, const shard_tag& tag) {
  chunk_bytes = std::max<uint64_t>(chunk_bytes, 1);
  for (uint64_t off = 0; off < bytes.size(); off += chunk_bytes) {
    const std::string_view chunk(bytes.data() + off,
                                 std::min<uint64_t>(chunk_bytes, bytes.size() - off));
    json h = shard_header(version, tag);
    h["offset"] = off;
    h["total_bytes"] = bytes.size();
    h["content_hash"] = content_hash;
    h["chunk_hash"] = store::sha256_hex(chunk);
    if (!tag.version_hash.empty()) h["version_hash"] = tag.version_hash;
    auto a = cache.call(wire::kPut, h, chunk);
    if (!a && a.err().code == errc::malformed_message) a = cache.call(wire::kPut, h, chunk);
    if (!a)
      return error(a.err().code, "put of " + shard_what(version, tag) + " to " + cache.endpoint() +
                                     ": " + a.err().message);
    if (a->header.value("complete", false)) return ok_status();
  }
  return error(errc::internal, "cache " + cache.endpoint() + " did not complete version " +
                                   std::to_string(version) + " after every chunk");
}

result<cache_client*> cache_connections::connection(const std::string& endpoint) {
  auto& c = clients_[endpoint];
  if (!c) {
    auto made = cache_client::connect(ctx_, endpoint, timeout_ms_);
    if (!made) {
      clients_.erase(endpoint);
      return made.err();
    }
    c = std::move(*made);
  }
  return c.get();
}

void cache_connections::retain(const std::vector<std::string>& endpoints) {
  for (auto it = clients_.begin(); it != clients_.end();)
    if (std::find(endpoints.begin(), endpoints.end(), it->first) == endpoints.end())
      it = clients_.erase(it);
    else
      ++it;
}

result<std::string> push_to_a_cache(cache_connections& connections,
                                    const std::vector<std::string>& caches, uint64_t version,
                                    const std::string& bytes, const std::string& content_hash,
                                    uint64_t chunk_bytes, const shard_tag& tag,
                                    fabric_pusher* fabric) {
  struct candidate {
    std::string endpoint;
    uint64_t load = 0;
  };
  std::vector<candidate> alive;
  error last(errc::not_found, "no checkpoint cache is alive");
  connections.retain(caches);  // `caches` are every cache alive
  for (const auto& ep : caches) {
    auto c = connections.connection(ep);
    if (!c) {
      last = c.err();
      continue;
    }
    if (caches.size() == 1) {  // nothing to choose between: the put itself finds a dead cache
      alive.push_back({ep, 0});
      break;
    }
    auto a = (*c)->call(wire::kLoad, json::object());
    if (!a) {
      last = a.err();
      connections.drop(ep);
      continue;
    }
    alive.push_back({ep, a->header.value("load", uint64_t{0})});
  }
  std::stable_sort(alive.begin(), alive.end(),
                   [](const candidate& a, const candidate& b) { return a.load < b.load; });
  for (auto& cand : alive) {
    auto c = connections.connection(cand.endpoint);
    if (!c) {
      last = c.err();
      continue;
    }
    if (fabric) {
      auto fst = fabric->push(**c, version, bytes, content_hash, tag);
      if (fst) return cand.endpoint;
      logger("weights")->warn("fabric put failed ({}); falling back to the ZeroMQ put",
                              fst.err().to_string());
    }
    auto st = push_version(**c, version, bytes, content_hash, chunk_bytes, tag);
    if (st) return cand.endpoint;
    last = st.err();
    connections.drop(cand.endpoint);  // dead or confused: a fresh socket next time
  }
  return last;
}

}  // namespace moerl::weights
