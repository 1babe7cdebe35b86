#include "store/digest.h"

#include <cstdlib>

#include <openssl/evp.h>

namespace moerl::store {

std::string sha256_hex(std::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  // EVP_Digest only fails on allocation failure or a missing algorithm; SHA-256 is built
  // into every OpenSSL, so a failure is a broken process, not bad input.
  const int ok = EVP_Digest(bytes.data(), bytes.size(), md, &md_len, EVP_sha256(), nullptr);
  if (ok != 1 || md_len != 32) std::abort();
  static const char hex[] = "0123456789abcdef";
  std::string out(2 * md_len, '0');
  for (unsigned int i = 0; i < md_len; ++i) {
    out[2 * i] = hex[md[i] >> 4];
    out[2 * i + 1] = hex[md[i] & 0xf];
  }
  return out;
}

}  // namespace moerl::store
