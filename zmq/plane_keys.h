// CurveZMQ keys of a cluster's ZeroMQ planes (samples, reward hop, env, weight caches, admin),
// derived from one cluster secret (a file every node of the cluster mounts, e.g. a Kubernetes
// Secret; `moerl secret init FILE` makes one). Why derived rather than distributed as four
// keys: one file to rotate and mount, and a node can neither mix keys of two clusters nor run
// with half of them.
//
// Every server socket uses the server key pair; every client uses the client key pair and
// names the server's public key. The server's ZAP handler (zmq/zap_handler.h) admits only the
// cluster's client public key, so a peer without the secret can neither read the traffic nor
// submit to any plane.
#pragma once

#include <string>

#include "common/error.h"

namespace moerl::zmq {

struct plane_keys {
  // Z85-encoded (40 characters each), as ZMQ_CURVE_* options take them.
  std::string server_public, server_secret, client_public, client_secret;
};

// The cluster secret must hold at least kMinPlaneSecretBytes bytes (trailing whitespace of a
// file is not part of it); a shorter one is refused by name.
constexpr size_t kMinPlaneSecretBytes = 32;
result<plane_keys> derive_plane_keys(const std::string& cluster_secret);

// Reads the secret from `path` (named in every error) and derives the keys.
result<plane_keys> load_plane_keys(const std::string& path);

// Writes a new random secret (64 hex characters from /dev/urandom) to `path` with mode 0600;
// refuses to overwrite an existing file.
status write_new_plane_secret(const std::string& path);

}  // namespace moerl::zmq
