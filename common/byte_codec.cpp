#include "common/byte_codec.h"

#include <array>
#include <cstring>

namespace moerl {

namespace {
// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), table built once.
std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}

static_assert(sizeof(float) == 4, "the formats store IEEE-754 binary32");
// On a little-endian host a float array already has the byte layout of the formats, and a
// weight buffer of millions of floats is one copy instead of a loop over bytes.
constexpr bool kHostIsLittleEndian = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;

uint32_t bits_of(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}
float float_of(uint32_t b) {
  float v;
  std::memcpy(&v, &b, 4);
  return v;
}
}  // namespace

uint32_t crc32(const void* data, size_t size) {
  static const std::array<uint32_t, 256> table = make_table();
  auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

void byte_writer::f32(float v) { u32(bits_of(v)); }

void byte_writer::f32s(const float* data, size_t num) {
  if (num == 0) return;  // an empty vector's data() may be null
  if (kHostIsLittleEndian) {
    raw(data, num * sizeof(float));
    return;
  }
  out_.reserve(out_.size() + num * 4);
  for (size_t i = 0; i < num; ++i) f32(data[i]);
}

float byte_reader::f32() { return float_of(u32()); }

void byte_reader::f32s(float* out, size_t num) {
  if (!ok_ || remaining() / 4 < num) {
    ok_ = false;
    return;
  }
  if (num == 0) return;
  if (kHostIsLittleEndian) {
    std::memcpy(out, p_, num * sizeof(float));
    p_ += num * sizeof(float);
    return;
  }
  for (size_t i = 0; i < num; ++i) out[i] = f32();
}

}  // namespace moerl
