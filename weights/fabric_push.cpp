#include "weights/fabric_push.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/config.h"
#include "common/hex.h"
#include "common/log.h"
#include "common/status_try.h"
#include "weights/wire.h"

namespace moerl::weights {
namespace {

using nlohmann::json;

// Writes in flight at once on the network path: enough to keep a link busy, few enough
// that a provider's queue is not the one refusing.
constexpr size_t kMaxWritesInFlight = 16;

}  // namespace

// ---- the cache's side ----------------------------------------------------------------------

fabric_landing::fabric_landing(fabric::transport_options options, int64_t put_timeout_ms)
    : options_(std::move(options)), put_timeout_ms_(put_timeout_ms) {}

fabric_landing::~fabric_landing() {
  for (auto& [ticket, r] : regions_) free_region(r);
  regions_.clear();
}

const fabric::transport_description* fabric_landing::describe() const {
  return transport_ ? &transport_->describe() : nullptr;
}

void fabric_landing::free_region(region& r) {
  // Deregistered before it is unmapped: a write that comes late fails at its writer instead
  // of landing in memory the cache gave back.
  if (transport_ && r.reg.ptr) {
    if (auto st = transport_->deregister_memory(r.reg); !st)
      logger("weights")->warn("fabric put region: {}", st.err().to_string());
  }
  if (r.ptr) ::munmap(r.ptr, r.size);
  if (r.fd >= 0) ::close(r.fd);
  r.ptr = nullptr;
  r.fd = -1;
}

result<json> fabric_landing::begin(uint64_t bytes, uint64_t write_bytes) {
  if (bytes == 0) return error(errc::invalid_argument, "put_begin of an empty version");
  if (!transport_) {
    auto opened = fabric::open_transport(options_);
    if (!opened)
      return error(opened.err().code,
                   "this cache cannot open its fabric transport: " + opened.err().message);
    transport_ = std::move(*opened);
    logger("weights")->info("fabric puts land through provider {}",
                            transport_->describe().provider);
  }
  // A memfd, so a pusher on this host maps it and stores into it (fabric/PROTOCOL.md, "Same
  // host"), registered so a pusher on another host writes it through the fabric.
  region r;
  r.size = bytes;
  r.fd = ::memfd_create("moerl-weights-put", MFD_CLOEXEC);
  if (r.fd < 0) return error(errc::io_error, "memfd_create for a fabric put failed");
  if (::ftruncate(r.fd, static_cast<off_t>(bytes)) != 0) {
    free_region(r);
    return error(errc::capacity_exceeded,
                 "cannot size a landing region of " + std::to_string(bytes) + " bytes");
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, r.fd, 0);
  if (p == MAP_FAILED) {
    free_region(r);
    return error(errc::capacity_exceeded,
                 "cannot map a landing region of " + std::to_string(bytes) + " bytes");
  }
  r.ptr = static_cast<char*>(p);
  auto reg = transport_->register_memory(r.ptr, bytes);
  if (!reg) {
    free_region(r);
    return reg.err();
  }
  r.reg = *reg;
  r.began_ns = fabric::now_ns();
  const uint32_t ticket = next_ticket_++;
  if (next_ticket_ == 0) next_ticket_ = 1;  // 0 is never a ticket
  json out{{"ticket", ticket},
           {"fabric_address", hex_encode(transport_->address())},
           {"region",
            {{"base", r.reg.remote.base},
             {"key", r.reg.remote.key},
             {"size", r.reg.remote.size},
             {"host_addr", reinterpret_cast<uint64_t>(r.ptr)},
             {"host_fd", r.fd}}},
           {"write_bytes", write_bytes}};
  regions_.emplace(ticket, std::move(r));
  return out;
}

status fabric_landing::progress() {
  if (!transport_) return ok_status();
  imms_.clear();
  STATUS_TRY(transport_->progress(imms_));
  // Each write's immediate is its put's ticket; a freed put's late immediates count nothing.
  for (uint32_t imm : imms_)
    if (auto it = regions_.find(imm); it != regions_.end()) ++it->second.writes;
  return ok_status();
}

result<std::string_view> fabric_landing::landed(uint32_t ticket, uint64_t writes, int wait_ms) {
  const int64_t deadline = fabric::now_ns() + int64_t{wait_ms} * 1000000;
  for (;;) {
    auto it = regions_.find(ticket);
    if (it == regions_.end())
      return error(errc::not_found, "fabric put " + std::to_string(ticket) +
                                        " is not in progress here (freed after its timeout, "
                                        "or never granted)");
    if (it->second.writes >= writes) return std::string_view(it->second.ptr, it->second.size);
    if (fabric::now_ns() > deadline)
      return error(errc::timeout, "fabric put " + std::to_string(ticket) + ": " +
                                      std::to_string(it->second.writes) + " of " +
                                      std::to_string(writes) + " writes arrived");
    STATUS_TRY(progress());
    if (transport_) transport_->idle_wait(100000);
  }
}

void fabric_landing::release(uint32_t ticket) {
  auto it = regions_.find(ticket);
  if (it == regions_.end()) return;
  free_region(it->second);
  regions_.erase(it);
}

std::vector<uint32_t> fabric_landing::expire() {
  std::vector<uint32_t> gone;
  const int64_t t = fabric::now_ns();
  for (auto it = regions_.begin(); it != regions_.end();) {
    if (t - it->second.began_ns <= put_timeout_ms_ * 1000000) {
      ++it;
      continue;
    }
    gone.push_back(it->first);
    free_region(it->second);
    it = regions_.erase(it);
  }
  return gone;
}

// ---- the pusher's side ---------------------------------------------------------------------

fabric_pusher::fabric_pusher(fabric::transport_options options, int timeout_ms)
    : options_(std::move(options)), timeout_ms_(timeout_ms) {}

fabric_pusher::~fabric_pusher() = default;

const fabric::transport_description* fabric_pusher::describe() const {
  return transport_ ? &transport_->describe() : nullptr;
}

result<fabric_grant> fabric_pusher::begin(cache_client& cache, uint64_t version,
                                          uint64_t total_bytes, const shard_tag& tag) {
  json h = shard_header(version, tag);
  h["total_bytes"] = total_bytes;
  ASSIGN_OR_RETURN(auto a, cache.call(wire::kPutBegin, h));
  fabric_grant g;
  if (a.header.value("complete", false)) {
    g.held = true;
    return g;
  }
  ASSIGN_OR_RETURN(auto ticket, wire::uint_field(a.header, "ticket"));
  ASSIGN_OR_RETURN(auto wb, wire::uint_field(a.header, "write_bytes"));
  const json& r = a.header["region"];
  if (!r.is_object() || !a.header["fabric_address"].is_string())
    return error(errc::malformed_message, "put_begin answer lacks region or fabric_address");
  ASSIGN_OR_RETURN(g.cache_address,
                   hex_decode(a.header["fabric_address"].get<std::string>(), "fabric_address"));
  ASSIGN_OR_RETURN(g.region.base, wire::uint_field(r, "base"));
  ASSIGN_OR_RETURN(g.region.key, wire::uint_field(r, "key"));
  ASSIGN_OR_RETURN(g.region.size, wire::uint_field(r, "size"));
  ASSIGN_OR_RETURN(g.region.host_addr, wire::uint_field(r, "host_addr"));
  g.region.host_fd = r.value("host_fd", int64_t{-1});
  if (g.region.size != total_bytes)
    return error(errc::malformed_message, "put_begin granted " + std::to_string(g.region.size) +
                                              " bytes for " + std::to_string(total_bytes));
  g.ticket = static_cast<uint32_t>(ticket);
  g.write_bytes = std::max<uint64_t>(wb, 1);
  return g;
}

result<uint64_t> fabric_pusher::write(const fabric_grant& g, const std::string& bytes,
                                      uint64_t from, uint64_t to) {
  if (to > bytes.size() || from > to || to > g.region.size)
    return error(errc::invalid_argument, "fabric put write range outside the version");
  if (!transport_) {
    ASSIGN_OR_RETURN(transport_, fabric::open_transport(options_));
  }
  // Peers set again for every put: the cache's address may differ, and a same-host cache's
  // earlier regions are unmapped here (their memfd numbers are reused by later regions).
  STATUS_TRY(transport_->set_peers({transport_->address(), g.cache_address}));
  constexpr int kCache = 1;
  const fabric::peer_distance d = transport_->distance(kCache);
  last_path_ = fabric::peer_distance_name(d);
  if (d != fabric::peer_distance::network) {
    // Plain stores into the cache's memfd; the commit message that follows (a syscall on a
    // socket the cache reads before it looks at the bytes) orders them for the cache.
    char* to_ptr = transport_->mapped(kCache, g.region, from, to - from);
    if (!to_ptr && to > from)
      return error(errc::peer_dead,
                   "cannot map the cache's landing region (same host, but "
                   "/proc/<pid>/fd of the cache is not open to us)");
    if (to > from) std::memcpy(to_ptr, bytes.data() + from, to - from);
    return uint64_t{0};
  }
  // The network: RMA writes from the version's own bytes, registered for as long as they fly.
  ASSIGN_OR_RETURN(auto src, transport_->register_memory(const_cast<char*>(bytes.data()),
                                                         std::max<size_t>(bytes.size(), 1)));
  const int64_t deadline = fabric::now_ns() + int64_t{timeout_ms_} * 1000000;
  uint64_t writes = 0;
  status st = ok_status();
  for (uint64_t off = from; off < to && st; off += g.write_bytes) {
    const uint64_t len = std::min<uint64_t>(g.write_bytes, to - off);
    while (transport_->outstanding() >= kMaxWritesInFlight && st) {
      imms_.clear();
      st = transport_->progress(imms_);
      if (st && fabric::now_ns() > deadline)
        st = error(errc::timeout, "the cache did not take the writes in time");
    }
    if (!st) break;
    st = transport_->write(kCache, src, bytes.data() + off, len, g.region, off, g.ticket, deadline);
    if (st) ++writes;
  }
  while (st && transport_->outstanding() > 0) {
    imms_.clear();
    st = transport_->progress(imms_);
    if (st && fabric::now_ns() > deadline)
      st = error(errc::timeout, "writes to the cache did not complete in time");
  }
  if (auto d2 = transport_->deregister_memory(src); !d2 && st) st = d2;
  if (!st) return st.err();
  return writes;
}

status fabric_pusher::commit(cache_client& cache, const fabric_grant& g, uint64_t version,
                             const std::string& content_hash, const shard_tag& tag,
                             uint64_t writes) {
  json h = shard_header(version, tag);
  h["ticket"] = g.ticket;
  h["writes"] = writes;
  h["content_hash"] = content_hash;
  if (!tag.version_hash.empty()) h["version_hash"] = tag.version_hash;
  ASSIGN_OR_RETURN(auto a, cache.call(wire::kPutCommit, h));
  if (!a.header.value("complete", false))
    return error(errc::internal, "cache " + cache.endpoint() + " did not complete the fabric put");
  return ok_status();
}

status fabric_pusher::push(cache_client& cache, uint64_t version, const std::string& bytes,
                           const std::string& content_hash, const shard_tag& tag) {
  std::lock_guard<std::mutex> lock(push_mu_);
  status st = push_locked(cache, version, bytes, content_hash, tag);
  ++(st ? num_pushed_ : num_failed_);
  return st;
}

status fabric_pusher::push_locked(cache_client& cache, uint64_t version, const std::string& bytes,
                                  const std::string& content_hash, const shard_tag& tag) {
  const std::string what = shard_what(version, tag);
  auto g = begin(cache, version, bytes.size(), tag);
  if (!g)
    return error(g.err().code,
                 "put_begin of " + what + " at " + cache.endpoint() + ": " + g.err().message);
  if (g->held) return ok_status();
  auto writes = write(*g, bytes, 0, bytes.size());
  if (!writes)
    return error(writes.err().code, "fabric writes of " + what + " to " + cache.endpoint() + ": " +
                                        writes.err().message);
  if (auto st = commit(cache, *g, version, content_hash, tag, *writes); !st)
    return error(st.err().code,
                 "put_commit of " + what + " at " + cache.endpoint() + ": " + st.err().message);
  return ok_status();
}

result<std::shared_ptr<fabric_pusher>> fabric_pusher_from_config(const config& cfg) {
  const std::string how = cfg.get_string("weights.shard_push");
  if (how == "zmq") return std::shared_ptr<fabric_pusher>();
  if (how != "fabric")
    return error(errc::invalid_config,
                 "weights.shard_push must be zmq or fabric, not '" + how + "'");
  return std::make_shared<fabric_pusher>(
      fabric::transport_options::from_config(cfg),
      static_cast<int>(cfg.get_int("weights.request_timeout_ms")));
}

}  // namespace moerl::weights
