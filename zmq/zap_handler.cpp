#include "zmq/zap_handler.h"

#include <zmq.h>

#include <vector>

#include "common/log.h"
#include "zmq/check.h"

namespace moerl::zmq {
namespace {

std::vector<std::string> receive_frames(void* sock) {
  std::vector<std::string> frames;
  for (int more = 1; more;) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, sock, 0) < 0) {
      zmq_msg_close(&m);
      return {};
    }
    frames.emplace_back(static_cast<const char*>(zmq_msg_data(&m)), zmq_msg_size(&m));
    more = zmq_msg_more(&m);
    zmq_msg_close(&m);
  }
  return frames;
}

void send_reply(void* sock, const std::string& request_id, bool admitted) {
  const std::string parts[] = {"1.0",
                               request_id,
                               admitted ? "200" : "400",
                               admitted ? "OK" : "client key is not this cluster's",
                               "",
                               ""};
  for (size_t i = 0; i < 6; ++i)
    zmq_send(sock, parts[i].data(), parts[i].size(), i + 1 < 6 ? ZMQ_SNDMORE : 0);
}

}  // namespace

result<std::function<void()>> bind_zap_handler(void* ctx, const std::string& allowed_client_z85,
                                               std::shared_ptr<std::atomic<uint64_t>> refused,
                                               std::shared_ptr<std::atomic<bool>> stop) {
  uint8_t allowed[32];
  if (allowed_client_z85.size() != 40 || !zmq_z85_decode(allowed, allowed_client_z85.c_str()))
    return error(errc::internal, "ZAP handler: the allowed client key is not 40 Z85 characters");
  void* sock = zmq_socket(ctx, ZMQ_REP);
  if (!sock) return detail::zmq_failure("zmq_socket(REP) for ZAP", zmq_errno(), __FILE__, __LINE__);
  const int linger = 0;
  zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
  if (zmq_bind(sock, "inproc://zeromq.zap.01") != 0) {
    const int e = zmq_errno();
    zmq_close(sock);
    return detail::zmq_failure("zmq_bind(inproc://zeromq.zap.01)", e, __FILE__, __LINE__);
  }
  std::string key(reinterpret_cast<const char*>(allowed), sizeof allowed);
  return std::function<void()>([sock, key, refused, stop] {
    while (!stop->load()) {
      zmq_pollitem_t item{sock, 0, ZMQ_POLLIN, 0};
      if (zmq_poll(&item, 1, 100) <= 0) continue;  // stop is checked every 100 ms
      auto f = receive_frames(sock);
      // version, request id, domain, address, routing id, mechanism, credentials...
      if (f.size() < 6) {  // a REP socket must answer every request it took
        send_reply(sock, f.size() > 1 ? f[1] : "", false);
        continue;
      }
      const bool admitted = f[0] == "1.0" && f[5] == "CURVE" && f.size() == 7 && f[6] == key;
      if (!admitted) {
        const uint64_t n = ++*refused;
        // The first refusal and then every 1000th: a scan must not flood the log.
        if (n == 1 || n % 1000 == 0)
          logger("zmq")->warn("refused a {} handshake from {} on the ZeroMQ planes ({} so far)",
                              f[5], f[3], n);
      }
      send_reply(sock, f[1], admitted);
    }
    zmq_close(sock);
  });
}

}  // namespace moerl::zmq
