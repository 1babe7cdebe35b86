#include "ledger/reward_hop.h"

#include "common/status_try.h"

#include <zmq.h>

// The sample plane's checking macro: one macro for the ZeroMQ domain, shared with ledger/.
#include "zmq/check.h"

namespace moerl::ledger {

result<std::unique_ptr<reward_push>> reward_push::connect(std::shared_ptr<zmq::zmq_context> ctx,
                                                          const std::vector<std::string>& endpoints,
                                                          int send_timeout_ms) {
  std::unique_ptr<reward_push> p(new reward_push);
  p->ctx_ = std::move(ctx);
  p->sock_ = zmq_socket(p->ctx_->handle(), ZMQ_PUSH);
  if (!p->sock_)
    return error(errc::io_error,
                 std::string("zmq_socket(PUSH) failed: ") + zmq_strerror(zmq_errno()));
  auto init = [&]() -> status {
    int linger = 0, hwm = 256;
    ZMQ_CHECK(zmq_setsockopt(p->sock_, ZMQ_LINGER, &linger, sizeof linger));
    ZMQ_CHECK(zmq_setsockopt(p->sock_, ZMQ_SNDHWM, &hwm, sizeof hwm));
    ZMQ_CHECK(zmq_setsockopt(p->sock_, ZMQ_SNDTIMEO, &send_timeout_ms, sizeof send_timeout_ms));
    STATUS_TRY(p->ctx_->secure_client(p->sock_));
    for (auto& e : endpoints) ZMQ_CHECK(zmq_connect(p->sock_, e.c_str()));
    return ok_status();
  };
  if (auto st = init(); !st) return st.err();
  return p;
}

reward_push::~reward_push() {
  if (sock_) zmq_close(sock_);
}

status reward_push::send(const std::string& shard_endpoint,
                         const std::vector<std::string>& sample_bytes) {
  if (sample_bytes.empty() || sample_bytes.size() > kMaxSamplesPerMessage)
    return error(errc::invalid_argument,
                 "reward hop: a message carries 1.." + std::to_string(kMaxSamplesPerMessage) +
                     " samples, not " + std::to_string(sample_bytes.size()));
  // The first part waits for the send timeout when no reward node has room; the rest of a
  // multipart message then goes out whole (ZeroMQ queues it atomically).
  ZMQ_CHECK(zmq_send(sock_, shard_endpoint.data(), shard_endpoint.size(), ZMQ_SNDMORE));
  for (size_t i = 0; i < sample_bytes.size(); ++i)
    ZMQ_CHECK(zmq_send(sock_, sample_bytes[i].data(), sample_bytes[i].size(),
                       i + 1 < sample_bytes.size() ? ZMQ_SNDMORE : 0));
  return ok_status();
}

result<std::unique_ptr<reward_pull>> reward_pull::bind(std::shared_ptr<zmq::zmq_context> ctx,
                                                       const std::string& endpoint) {
  auto sock = zmq::zmq_server_socket::bind(std::move(ctx), ZMQ_PULL, "PULL", endpoint,
                                           /*rcv_hwm=*/256, /*snd_hwm=*/0);
  if (!sock) return sock.err();
  return std::unique_ptr<reward_pull>(new reward_pull(std::move(*sock)));
}

}  // namespace moerl::ledger
