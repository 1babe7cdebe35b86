// One little-endian byte codec for every hand-written binary format in moerl (the ledger's
// journal and snapshots, parameter bytes, optimiser state, reward model checkpoints):
// byte_writer appends values, byte_reader takes them off the front, and crc32() detects torn
// or damaged records. Multi-byte values are little-endian whatever the host's byte order,
// so a file written on one machine reads on any other.
//
// The reader never reads past its end: a short or inconsistent input makes ok() false, every
// later read returns zero/empty, and the caller checks ok() once where it is convenient
// (after a field whose absence it wants to name, or at the end).
//
// Threading: a writer or reader is one caller's; distinct objects are independent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace moerl {

// CRC-32 (IEEE 802.3, the one zlib and Ethernet use) of `size` bytes.
uint32_t crc32(const void* data, size_t size);

class byte_writer {
 public:
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) { put(v, 4); }
  void u64(uint64_t v) { put(v, 8); }
  void i64(int64_t v) { put(static_cast<uint64_t>(v), 8); }
  // IEEE-754 binary32, its bit pattern as a u32.
  void f32(float v);
  // `num` floats back to back, no count (the format states it elsewhere).
  void f32s(const float* data, size_t num);
  // u32 length, then the bytes.
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  // u32 count, then each element as u64.
  void u64s(const std::vector<uint64_t>& v) {
    u32(static_cast<uint32_t>(v.size()));
    for (uint64_t x : v) u64(x);
  }
  // Bytes as they are: magics, and nested formats that are already bytes.
  void raw(const void* data, size_t size) { out_.append(static_cast<const char*>(data), size); }
  void raw(const std::string& bytes) { out_.append(bytes); }
  // What was written so far; move from it to take the result.
  std::string& bytes() { return out_; }

 private:
  void put(uint64_t v, int num_bytes) {
    for (int i = 0; i < num_bytes; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string out_;
};

// Reads the format byte_writer writes from [data, data + size), which must outlive it.
class byte_reader {
 public:
  byte_reader(const char* data, size_t size) : p_(data), end_(data + size) {}
  uint8_t u8() { return static_cast<uint8_t>(get(1)); }
  uint32_t u32() { return static_cast<uint32_t>(get(4)); }
  uint64_t u64() { return get(8); }
  int64_t i64() { return static_cast<int64_t>(get(8)); }
  float f32();
  // `num` floats into out[0, num); leaves `out` untouched and fails when fewer remain.
  void f32s(float* out, size_t num);
  std::string str() {
    uint32_t n = u32();
    if (!ok_ || remaining() < n) return fail_str();
    std::string s(p_, n);
    p_ += n;
    return s;
  }
  std::vector<uint64_t> u64s() {
    uint32_t n = u32();
    // Each element is 8 bytes: a count larger than what is left is damage, not a request
    // to allocate.
    if (!ok_ || remaining() / 8 < n) {
      ok_ = false;
      return {};
    }
    std::vector<uint64_t> v(n);
    for (auto& x : v) x = u64();
    return v;
  }
  // The next `size` bytes as they are (a magic, a nested format); empty and failed when
  // fewer remain.
  std::string raw(size_t size) {
    if (!ok_ || remaining() < size) return fail_str();
    std::string s(p_, size);
    p_ += size;
    return s;
  }
  bool ok() const { return ok_; }
  bool at_end() const { return p_ == end_; }
  size_t remaining() const { return size_t(end_ - p_); }

 private:
  uint64_t get(int num_bytes) {
    if (!ok_ || end_ - p_ < num_bytes) {
      ok_ = false;
      return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < num_bytes; ++i) v |= uint64_t(static_cast<unsigned char>(p_[i])) << (8 * i);
    p_ += num_bytes;
    return v;
  }
  std::string fail_str() {
    ok_ = false;
    return {};
  }
  const char* p_;
  const char* end_;
  bool ok_ = true;
};

}  // namespace moerl
