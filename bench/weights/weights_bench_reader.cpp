#include "bench/weights/weights_bench_reader.h"

#include <unistd.h>
#include <zmq.h>

#include <chrono>
#include <functional>
#include <memory>

#include <nlohmann/json.hpp>

#include "common/config.h"
#include "common/status_try.h"
#include "job/grpo_job.h"
#include "policy/params.h"
#include "store/object_store.h"
#include "weights/fanout_plan.h"
#include "weights/fanout_reader.h"
#include "weights/peer_server.h"
#include "weights/version_reader.h"
#include "zmq/check.h"
#include "zmq/context.h"
#include "zmq/parts.h"

namespace moerl::bench {
namespace {

using nlohmann::json;

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

status send_parts(void* sock, const std::string& a, const std::string& b) {
  ZMQ_CHECK(zmq_send(sock, a.data(), a.size(), ZMQ_SNDMORE));
  ZMQ_CHECK(zmq_send(sock, b.data(), b.size(), 0));
  return ok_status();
}

// A version's bytes from the source, verified whole; the size read. `go`: the bench's "go"
// body ({version, readers}).
using fetcher = std::function<result<size_t>(const json& go)>;

// Generous: a cache serving eight readers 512 MiB each on a loaded two-core host is slow,
// and the benchmark measures that rather than fail over.
constexpr int kCacheTimeoutMs = 60000;

}  // namespace

status run_weights_reader(const weights_reader_args& args) {
  ASSIGN_OR_RETURN(auto ctx, zmq::zmq_context::create());
  const pid_t parent = getppid();

  fetcher fetch;
  std::unique_ptr<weights::version_reader> reader;
  std::unique_ptr<store::object_store> store;
  std::shared_ptr<weights::peer_server> peer;  // fanout: what this reader serves
  std::unique_ptr<weights::fanout_reader> fanout;
  if (args.source == "cache" || args.source == "cache_shm") {
    reader =
        std::make_unique<weights::version_reader>(ctx, kCacheTimeoutMs, args.source == "cache_shm");
    fetch = [&](const json&) -> result<size_t> {
      ASSIGN_OR_RETURN(auto got, reader->fetch(args.version, {args.at}, nullptr));
      return got.bytes->size();
    };
  } else if (args.source == "fanout") {
    // One version held at a time (the bench names a new one per delivery), so a reader's
    // memory stays at about two versions while the next arrives.
    ASSIGN_OR_RETURN(auto started,
                     weights::peer_server::start(ctx, args.bind, 1, uint64_t{1} << 40));
    peer = std::move(started);
    fanout = std::make_unique<weights::fanout_reader>(ctx, peer, kCacheTimeoutMs, kCacheTimeoutMs);
    fetch = [&](const json& go) -> result<size_t> {
      const auto version = go.value("version", args.version);
      // Every reader finished the previous delivery before this "go": nobody reads older
      // versions from us, and keeping one would double our memory while this one arrives.
      peer->held().erase_older_than(version);
      const auto readers = go.value("readers", std::vector<std::string>{});
      auto sources = weights::fanout_sources(readers, peer->endpoint(), {args.at}, args.degree);
      ASSIGN_OR_RETURN(auto got, fanout->fetch(version, sources, nullptr));
      return got.bytes->size();
    };
  } else if (args.source == "store") {
    ASSIGN_OR_RETURN(auto cfg, config::load("", args.overrides));
    ASSIGN_OR_RETURN(auto opened, store::open_store(args.at, cfg));
    store = std::move(opened);
    fetch = [&](const json&) -> result<size_t> {
      // As a rollout node reads the store: the bytes, then their hash, checked.
      const std::string key = job::weights_key(kBenchStorePrefix, args.version);
      ASSIGN_OR_RETURN(auto bytes, store->get(key));
      ASSIGN_OR_RETURN(auto hash, store->get(key + ".hash"));
      if (policy::content_hash(bytes) != hash)
        return error(errc::malformed_message, key + " does not match its content hash");
      return bytes.size();
    };
  } else {
    return error(errc::invalid_argument,
                 "weights-reader --source must be cache, cache_shm, fanout or store, got '" +
                     args.source + "'");
  }

  void* sock = zmq_socket(ctx->handle(), ZMQ_DEALER);
  if (!sock) return error(errc::io_error, "zmq_socket(DEALER) failed");
  struct closer {
    void* s;
    ~closer() { zmq_close(s); }
  } close_sock{sock};
  int linger = 0;
  ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger));
  ZMQ_CHECK(zmq_connect(sock, args.control.c_str()));
  const json ready = peer ? json{{"endpoint", peer->endpoint()}} : json::object();
  if (auto st = send_parts(sock, "ready", ready.dump()); !st) return st;

  for (;;) {
    zmq_pollitem_t item{sock, 0, ZMQ_POLLIN, 0};
    const int n = zmq_poll(&item, 1, 1000);
    ZMQ_CHECK(n);
    if (n == 0) {
      if (getppid() != parent) return ok_status();  // the bench is gone: nobody to answer
      continue;
    }
    ASSIGN_OR_RETURN(auto parts, zmq::recv_message_parts(sock, "zmq_msg_recv(DEALER)"));
    if (parts.empty() || parts[0] == "exit") return ok_status();
    if (parts[0] != "go") continue;
    const json go = parts.size() > 1 ? json::parse(parts[1], nullptr, false) : json::object();
    const uint64_t peer_before = fanout ? fanout->counters().bytes_from_peer : 0;
    auto got = fetch(go.is_object() ? go : json::object());
    const int64_t done_ns = steady_ns();
    json answer{{"done_ns", done_ns}, {"ok", static_cast<bool>(got)}};
    if (fanout) answer["peer_bytes"] = fanout->counters().bytes_from_peer - peer_before;
    if (got)
      answer["bytes"] = *got;
    else
      answer["error"] = got.err().to_string();
    if (auto st = send_parts(sock, "done", answer.dump()); !st) return st;
  }
}

}  // namespace moerl::bench
