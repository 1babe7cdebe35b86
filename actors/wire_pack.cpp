#include "actors/wire_pack.h"

namespace moerl::actors {

std::string pack_u64s(const std::vector<uint64_t>& v) {
  std::string out;
  out.reserve(v.size() * 8);
  for (uint64_t x : v)
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((x >> (8 * i)) & 0xff));
  return out;
}

result<std::vector<uint64_t>> unpack_u64s(const std::string& bytes) {
  if (bytes.size() % 8 != 0)
    return error(errc::malformed_message, "packed u64 list of " + std::to_string(bytes.size()) +
                                              " bytes is not a multiple of 8");
  std::vector<uint64_t> v(bytes.size() / 8);
  for (size_t k = 0; k < v.size(); ++k) {
    uint64_t x = 0;
    for (int i = 0; i < 8; ++i) x |= uint64_t(static_cast<unsigned char>(bytes[8 * k + i])) << (8 * i);
    v[k] = x;
  }
  return v;
}

}  // namespace moerl::actors
