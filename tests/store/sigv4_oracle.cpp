#include "sigv4_oracle.h"

#include <cstdlib>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "store/digest.h"

namespace moerl::store::testing {

std::string hmac_sha256(const std::string& key, const std::string& data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len) == nullptr)
    std::abort();  // only on allocation failure: the test cannot continue meaningfully
  return std::string(reinterpret_cast<char*>(out), len);
}

std::string to_hex(const std::string& raw) {
  static const char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out += hex[c >> 4];
    out += hex[c & 0xf];
  }
  return out;
}

sigv4_output sigv4_sign(const sigv4_input& in) {
  sigv4_output out;
  std::string canonical_headers;
  for (const auto& [name, value] : in.headers) {
    canonical_headers += name + ":" + value + "\n";
    if (!out.signed_headers.empty()) out.signed_headers += ";";
    out.signed_headers += name;
  }
  // Task 1: the canonical request, one field per line.
  out.canonical_request = in.method + "\n" + in.canonical_uri + "\n" + in.canonical_query + "\n" +
                          canonical_headers + "\n" + out.signed_headers + "\n" + in.payload_hash;
  // Task 2: what gets signed: algorithm, time, scope, hash of the canonical request.
  const std::string date = in.amz_date.substr(0, 8);
  const std::string scope = date + "/" + in.region + "/" + in.service + "/aws4_request";
  out.string_to_sign =
      "AWS4-HMAC-SHA256\n" + in.amz_date + "\n" + scope + "\n" + sha256_hex(out.canonical_request);
  // Task 3: the signing key is derived from the secret through the scope's parts.
  std::string key = hmac_sha256("AWS4" + in.secret_access_key, date);
  key = hmac_sha256(key, in.region);
  key = hmac_sha256(key, in.service);
  key = hmac_sha256(key, "aws4_request");
  out.signature = to_hex(hmac_sha256(key, out.string_to_sign));
  out.authorization = "AWS4-HMAC-SHA256 Credential=" + in.access_key_id + "/" + scope +
                      ", SignedHeaders=" + out.signed_headers + ", Signature=" + out.signature;
  return out;
}

}  // namespace moerl::store::testing
