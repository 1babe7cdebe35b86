// console/internal/gated_http_server.h says why the HTTP console serves through these.
#include "console/internal/gated_http_server.h"

namespace moerl::console {
namespace httplib_private {  // external linkage: they are defined in the library

// httplib 0.11's Server::process_and_close_socket and SSLServer::process_and_close_socket,
// called without virtual dispatch (the gated server overrides them) through the symbols
// Debian's libcpp-httplib exports for them. They are member functions of the Itanium C++ ABI
// (`this` first, then the socket); access control cannot apply to a symbol, which is why they
// are reachable at all. A library whose symbols differ fails to link here, not at run time.
bool httplib_server_process(httplib::Server* self,
                            int sock) __asm__("_ZN7httplib6Server24process_and_close_socketEi");
bool httplib_ssl_server_process(httplib::SSLServer* self, int sock) __asm__(
    "_ZN7httplib9SSLServer24process_and_close_socketEi");

}  // namespace httplib_private

bool serve_connection(httplib::Server* server, int sock) {
  return httplib_private::httplib_server_process(server, sock);
}

bool serve_connection(httplib::SSLServer* server, int sock) {
  return httplib_private::httplib_ssl_server_process(server, sock);
}

}  // namespace moerl::console
