#include "zmq/plane_keys.h"

#include <fcntl.h>
#include <openssl/sha.h>
#include <unistd.h>
#include <zmq.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include "common/hex.h"
#include "common/status_try.h"

namespace moerl::zmq {
namespace {

// A Curve25519 secret key for `label` from the cluster secret: SHA-256 of label and secret
// (X25519 clamps whatever 32 bytes it gets), Z85-encoded; its public half through libzmq.
result<std::pair<std::string, std::string>> derive_pair(const std::string& label,
                                                        const std::string& secret) {
  std::string input = "moerl plane key v1\n" + label + "\n" + secret;
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(input.data()), input.size(), digest);
  char secret_z85[41] = {0}, public_z85[41] = {0};
  if (!zmq_z85_encode(secret_z85, digest, sizeof digest))
    return error(errc::internal, "zmq_z85_encode failed deriving the " + label + " key");
  if (zmq_curve_public(public_z85, secret_z85) != 0)
    return error(errc::internal, std::string("zmq_curve_public failed (libzmq without CURVE?): ") +
                                     zmq_strerror(zmq_errno()));
  return std::make_pair(std::string(public_z85), std::string(secret_z85));
}

}  // namespace

result<plane_keys> derive_plane_keys(const std::string& cluster_secret) {
  if (!zmq_has("curve"))
    return error(errc::invalid_config,
                 "this libzmq was built without CURVE: the ZeroMQ planes cannot be encrypted");
  std::string s = cluster_secret;
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  if (s.size() < kMinPlaneSecretBytes)
    return error(errc::invalid_config, "the cluster's plane secret has " +
                                           std::to_string(s.size()) + " bytes; it needs at least " +
                                           std::to_string(kMinPlaneSecretBytes));
  plane_keys k;
  ASSIGN_OR_RETURN(auto server, derive_pair("server", s));
  ASSIGN_OR_RETURN(auto client, derive_pair("client", s));
  k.server_public = server.first;
  k.server_secret = server.second;
  k.client_public = client.first;
  k.client_secret = client.second;
  return k;
}

result<plane_keys> load_plane_keys(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return error(errc::invalid_config,
                 "node.plane_secret_file " + path + ": " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  auto keys = derive_plane_keys(ss.str());
  if (!keys)
    return error(keys.err().code, "node.plane_secret_file " + path + ": " + keys.err().message);
  return keys;
}

status write_new_plane_secret(const std::string& path) {
  unsigned char raw[32];
  std::ifstream rnd("/dev/urandom", std::ios::binary);
  if (!rnd.read(reinterpret_cast<char*>(raw), sizeof raw))
    return error(errc::io_error, "cannot read /dev/urandom");
  std::string text = hex_encode(std::string_view(reinterpret_cast<const char*>(raw), sizeof raw));
  text.push_back('\n');
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return error(errc::io_error, path + ": " + std::strerror(errno));
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int saved = errno;
  ::close(fd);
  if (!ok) return error(errc::io_error, path + ": " + std::strerror(saved));
  return ok_status();
}

}  // namespace moerl::zmq
