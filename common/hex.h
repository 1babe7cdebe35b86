#pragma once
// Lower-case hexadecimal text for bytes, and back: the one encoder behind sha256 digests, the
// plane secret file and the fabric addresses carried in JSON headers.
#include <string>
#include <string_view>

#include "common/error.h"

namespace moerl {

// Two lower-case digits per byte, most significant nibble first.
std::string hex_encode(std::string_view bytes);

// The bytes `hex` spells (lower- or upper-case digits); malformed_message naming `what`
// when it is not hex of whole bytes.
result<std::string> hex_decode(std::string_view hex, std::string_view what);

}  // namespace moerl
