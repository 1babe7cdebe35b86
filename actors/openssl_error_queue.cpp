// OpenSSL keeps one error queue per thread, and SSL_get_error() consults it before the return
// value it is given: the queue must be empty before every SSL I/O call (SSL_get_error(3)).
// caf_openssl 0.17.6 never empties it (it reads the queue only inside CAF_LOG_* macros, which
// Debian's CAF build compiles out), and every TLS link of a process runs on the middleman's one
// multiplexer thread. So one peer's abrupt close ("unexpected eof while reading") or one refused
// handshake ("certificate verify failed") stays queued, and the next link whose SSL_read merely
// has no data yet (-1, want-read) is reported SSL_ERROR_SSL and closed, then the next: the "TLS
// link cascade" (actors/RUNTIME.md, "TLS"; tests/actors/cluster_tls_test.cpp).
//
// moerl does not carry its own copy of CAF's TLS transport. Instead its executable defines the
// four SSL calls caf_openssl makes: the dynamic linker binds libcaf_openssl's (and cpp-httplib's)
// calls to the executable's definitions, which come first in the global lookup scope, and each
// one empties this thread's queue and then calls libssl's own (found with RTLD_NEXT). The
// change CAF would need instead: ERR_clear_error() before SSL_connect/SSL_accept/SSL_read/
// SSL_write in its session, and draining the queue outside the log macros on every failure.
#include "actors/internal/openssl_error_queue.h"

#include <dlfcn.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <string>

namespace {

// libssl's own definition of `name`, the next one after this executable's.
template <class Fn>
Fn next_definition(const char* name) {
  return reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" {

int SSL_read(SSL* ssl, void* buf, int num) {
  static const auto real = next_definition<int (*)(SSL*, void*, int)>("SSL_read");
  ERR_clear_error();
  return real(ssl, buf, num);
}

int SSL_write(SSL* ssl, const void* buf, int num) {
  static const auto real = next_definition<int (*)(SSL*, const void*, int)>("SSL_write");
  ERR_clear_error();
  return real(ssl, buf, num);
}

int SSL_connect(SSL* ssl) {
  static const auto real = next_definition<int (*)(SSL*)>("SSL_connect");
  ERR_clear_error();
  return real(ssl);
}

int SSL_accept(SSL* ssl) {
  static const auto real = next_definition<int (*)(SSL*)>("SSL_accept");
  ERR_clear_error();
  return real(ssl);
}

}  // extern "C"

namespace moerl::actors {

moerl::status check_openssl_error_queue_guard() {
  // The process-wide definition the dynamic linker hands out must be ours (it is not when
  // this object is linked into a shared library that loads after libssl, or statically).
  const void* bound = ::dlsym(RTLD_DEFAULT, "SSL_read");
  if (bound != reinterpret_cast<const void*>(&SSL_read))
    return moerl::error(moerl::errc::internal,
                        "TLS: SSL_read does not resolve to moerl's error-queue guard "
                        "(actors/openssl_error_queue.cpp): one link's TLS failure would close "
                        "the others");
  return moerl::ok_status();
}

}  // namespace moerl::actors
