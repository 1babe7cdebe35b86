// What the durable plane actually runs on, for provenance and benchmark reports: the
// store's description and the libcurl/TLS versions behind the S3 backend.
#pragma once

#include <nlohmann/json.hpp>

#include "store/object_store.h"

namespace moerl::store {

// {"store": describe(), "libcurl": "7.88.1", "tls": "OpenSSL/3.0.x", "aws_sigv4": bool}
nlohmann::json durable_plane_info(const object_store& store);

}  // namespace moerl::store
