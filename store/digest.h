// SHA-256 through OpenSSL's EVP interface, as lower-case hex. Used for S3's
// x-amz-content-sha256 header and for checkpoint part and content hashes.
#pragma once

#include <string>
#include <string_view>

namespace moerl::store {

// Hex SHA-256 of `bytes`. Safe to call from any thread.
std::string sha256_hex(std::string_view bytes);

// Hex SHA-256 of the empty string: the payload hash of every body-less S3 request.
inline constexpr const char* empty_sha256_hex =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

}  // namespace moerl::store
