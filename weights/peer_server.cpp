#include "weights/peer_server.h"

#include <chrono>

#include "common/log.h"
#include "common/status_try.h"

namespace moerl::weights {
namespace {

// How long one poll waits for a request: bounds how late the thread notices stop.
constexpr int kPollMs = 20;
// Puts stage whole versions in the server; a reader only relays, so its chunking for puts
// is irrelevant (any positive value).
constexpr uint64_t kUnusedPutChunkBytes = 1 << 20;

}  // namespace

result<std::unique_ptr<peer_server>> peer_server::start(std::shared_ptr<zmq::zmq_context> ctx,
                                                        const std::string& endpoint,
                                                        uint64_t max_versions, uint64_t max_bytes) {
  std::unique_ptr<peer_server> p(new peer_server);
  p->held_ = std::make_shared<version_cache>(max_versions, max_bytes);
  p->arriving_ = std::make_shared<arriving_versions>();
  ASSIGN_OR_RETURN(p->server_,
                   cache_server::bind(std::move(ctx), endpoint, p->held_, kUnusedPutChunkBytes));
  p->server_->serve_arriving(p->arriving_);
  p->endpoint_ = p->server_->endpoint();
  p->thread_ = std::thread([raw = p.get()] { raw->serve_loop(); });
  return p;
}

peer_server::~peer_server() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void peer_server::serve_loop() {
  int64_t failures = 0;
  while (!stop_) {
    if (auto st = server_->poll(kPollMs); !st) {
      // A socket failure: say so (rarely) and keep going; the peers fall back meanwhile.
      if (failures++ % 100 == 0)
        logger("weights")->warn("peer server {}: {}", endpoint_, st.err().to_string());
      std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
    }
    std::lock_guard<std::mutex> g(counters_mu_);
    counters_ = server_->counters();
  }
}

server_counters peer_server::counters() const {
  std::lock_guard<std::mutex> g(counters_mu_);
  return counters_;
}

}  // namespace moerl::weights
