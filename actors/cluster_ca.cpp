#include "actors/cluster_ca.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "common/status_try.h"

namespace moerl::actors {

namespace {

using pkey_ptr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using x509_ptr = std::unique_ptr<X509, decltype(&X509_free)>;

error ssl_failure(const std::string& what) {
  return error(errc::io_error, "moerl ca init: " + what + " failed (OpenSSL)");
}

result<pkey_ptr> new_key() {
  pkey_ptr k(EVP_EC_gen("P-256"), EVP_PKEY_free);
  if (!k) return ssl_failure("generating a P-256 key");
  return k;
}

bool add_ext(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (!ext) return false;
  const bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

// A certificate for `key` named `cn`, signed by `ca_key` (self-signed when `issuer` is null).
result<x509_ptr> make_cert(EVP_PKEY* key, const std::string& cn, X509* issuer, EVP_PKEY* ca_key,
                           int days) {
  x509_ptr c(X509_new(), X509_free);
  if (!c) return ssl_failure("X509_new");
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) return ssl_failure("a random serial");
  serial[0] &= 0x7f;  // positive
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  const bool serial_ok = bn && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(c.get()));
  BN_free(bn);
  X509_NAME* name = X509_get_subject_name(c.get());
  if (!serial_ok || X509_set_version(c.get(), 2) != 1 ||
      !X509_gmtime_adj(X509_getm_notBefore(c.get()), -60) ||
      !X509_gmtime_adj(X509_getm_notAfter(c.get()), 86400L * days) ||
      X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                 reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                                 0) != 1 ||
      X509_set_issuer_name(c.get(), issuer ? X509_get_subject_name(issuer) : name) != 1 ||
      X509_set_pubkey(c.get(), key) != 1)
    return ssl_failure("filling the certificate of " + cn);
  X509* iss = issuer ? issuer : c.get();
  const bool ext_ok =
      issuer ? add_ext(c.get(), iss, NID_basic_constraints, "critical,CA:FALSE") &&
                   add_ext(c.get(), iss, NID_key_usage, "critical,digitalSignature") &&
                   add_ext(c.get(), iss, NID_ext_key_usage, "serverAuth,clientAuth")
             : add_ext(c.get(), iss, NID_basic_constraints, "critical,CA:TRUE") &&
                   add_ext(c.get(), iss, NID_key_usage, "critical,keyCertSign,cRLSign") &&
                   add_ext(c.get(), iss, NID_subject_key_identifier, "hash");
  if (!ext_ok) return ssl_failure("the extensions of " + cn);
  if (X509_sign(c.get(), ca_key, EVP_sha256()) <= 0) return ssl_failure("signing " + cn);
  return c;
}

status write_pem(const std::string& path, mode_t mode, X509* cert, EVP_PKEY* key) {
  std::unique_ptr<FILE, decltype(&std::fclose)> f(std::fopen(path.c_str(), "wx"), std::fclose);
  if (!f) return error(errc::io_error, "moerl ca init: " + path + ": " + std::strerror(errno));
  if (::fchmod(::fileno(f.get()), mode) != 0)
    return error(errc::io_error, "moerl ca init: chmod " + path + ": " + std::strerror(errno));
  const bool ok =
      cert ? PEM_write_X509(f.get(), cert) == 1
           : PEM_write_PrivateKey(f.get(), key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
  if (!ok) return ssl_failure("writing " + path);
  return ok_status();
}

}  // namespace

status write_cluster_ca(const std::string& dir, int days) {
  if (::mkdir(dir.c_str(), 0700) != 0)
    return error(errc::io_error,
                 "moerl ca init: cannot make " + dir + ": " + std::strerror(errno) +
                     (errno == EEXIST ? " (a CA is never overwritten; pick a new directory)" : ""));
  ASSIGN_OR_RETURN(auto ca_key, new_key());
  ASSIGN_OR_RETURN(auto ca,
                   make_cert(ca_key.get(), "moerl-cluster-ca", nullptr, ca_key.get(), days));
  ASSIGN_OR_RETURN(auto node_key, new_key());
  ASSIGN_OR_RETURN(auto node,
                   make_cert(node_key.get(), "moerl-node", ca.get(), ca_key.get(), days));
  STATUS_TRY(write_pem(dir + "/ca.key", 0600, nullptr, ca_key.get()));
  STATUS_TRY(write_pem(dir + "/ca.crt", 0644, ca.get(), nullptr));
  STATUS_TRY(write_pem(dir + "/tls.key", 0600, nullptr, node_key.get()));
  STATUS_TRY(write_pem(dir + "/tls.crt", 0644, node.get(), nullptr));
  return ok_status();
}

}  // namespace moerl::actors
