#include "zmq/plane_context.h"

#include "common/loopback.h"
#include "common/status_try.h"

namespace moerl::zmq {

result<std::shared_ptr<zmq_context>> make_plane_context(const config& cfg) {
  const std::string secret_file = cfg.get_string("node.plane_secret_file");
  const std::string host = cfg.get_string("node.host");
  if (secret_file.empty()) {
    if (!is_loopback_host(host))
      return error(errc::invalid_config,
                   "node.host is " + host +
                       " (not loopback) and node.plane_secret_file is not set: the ZeroMQ planes "
                       "(samples, reward, env, weights) would be open to anyone who reaches "
                       "this address; give every node of the cluster the same secret file "
                       "(`moerl secret init FILE` makes one)");
    return zmq_context::create();
  }
  ASSIGN_OR_RETURN(auto keys, load_plane_keys(secret_file));
  return zmq_context::create(std::move(keys));
}

}  // namespace moerl::zmq
