// Receiving one whole ZeroMQ message, every part of it, without blocking: the one loop for the
// sockets that frame their own messages (zmq/server_socket.h for the reward and env
// servers; weights/cache_server.h and weights/cache_client.h for the checkpoint caches). The
// caller checks the number of parts its protocol expects. EAGAIN (nothing queued) comes back
// as errc::capacity_exceeded, like every ZMQ_CHECK'd call (zmq/check.h).
#pragma once

#include <zmq.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "zmq/check.h"

namespace moerl::zmq {

// `what` names the socket in the error ("zmq_msg_recv(ROUTER)").
inline result<std::vector<std::string>> recv_message_parts(void* sock, const std::string& what) {
  std::vector<std::string> parts;
  for (bool more = true; more;) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, sock, ZMQ_DONTWAIT) == -1) {
      const int e = zmq_errno();
      zmq_msg_close(&msg);
      return detail::zmq_failure(what.c_str(), e, __FILE__, __LINE__);
    }
    parts.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    more = zmq_msg_more(&msg);
    zmq_msg_close(&msg);
  }
  return parts;
}

}  // namespace moerl::zmq
