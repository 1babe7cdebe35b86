#include "store/digest.h"

#include <cstdlib>

#include <openssl/evp.h>

#include "common/hex.h"

namespace moerl::store {

std::string sha256_hex(std::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  // EVP_Digest only fails on allocation failure or a missing algorithm; SHA-256 is built
  // into every OpenSSL, so a failure is a broken process, not bad input.
  const int ok = EVP_Digest(bytes.data(), bytes.size(), md, &md_len, EVP_sha256(), nullptr);
  if (ok != 1 || md_len != 32) std::abort();
  return hex_encode(std::string_view(reinterpret_cast<const char*>(md), md_len));
}

}  // namespace moerl::store
