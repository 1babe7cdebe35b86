#include "common/advertised_endpoint.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <unistd.h>

#include <memory>

#include "common/status_try.h"

namespace moerl {
namespace {

bool is_wildcard(const std::string& host) {
  return host == "0.0.0.0" || host == "*" || host == "::" || host == "[::]";
}

result<std::string> this_host_address() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0)
    return error(errc::io_error, "gethostname failed");
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(name, nullptr, &hints, &found); rc != 0)
    return error(errc::io_error, std::string("this host's name ") + name + " does not resolve (" +
                                     ::gai_strerror(rc) +
                                     "): set node.host to the address peers reach this node at");
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(found, ::freeaddrinfo);
  std::string loopback;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char text[INET_ADDRSTRLEN] = {};
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) == nullptr) continue;
    if ((ntohl(in->sin_addr.s_addr) >> 24) != 127) return std::string(text);
    if (loopback.empty()) loopback = text;
  }
  if (loopback.empty())
    return error(errc::io_error, std::string("this host's name ") + name +
                                     " resolves to no IPv4 address: set node.host");
  return loopback;
}

}  // namespace

result<std::string> advertised_endpoint(const std::string& bound) {
  const std::string scheme = "tcp://";
  const auto colon = bound.rfind(':');
  if (bound.compare(0, scheme.size(), scheme) != 0 || colon == std::string::npos ||
      colon < scheme.size())
    return error(errc::invalid_argument, "endpoint " + bound + " is not tcp://HOST:PORT");
  const std::string host = bound.substr(scheme.size(), colon - scheme.size());
  if (!is_wildcard(host)) return bound;
  ASSIGN_OR_RETURN(auto addr, this_host_address());
  return scheme + addr + bound.substr(colon);
}

}  // namespace moerl
