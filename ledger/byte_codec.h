// Private to the ledger: little-endian byte writer/reader for journal records and
// snapshots, and CRC-32 to detect torn or damaged records. The reader never reads past
// its end; a short or bad input makes ok() false instead of crashing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace moerl::ledger::detail {

uint32_t crc32(const void* data, size_t size);

class byte_writer {
 public:
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) { put(v, 4); }
  void u64(uint64_t v) { put(v, 8); }
  void i64(int64_t v) { put(static_cast<uint64_t>(v), 8); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void u64s(const std::vector<uint64_t>& v) {
    u32(static_cast<uint32_t>(v.size()));
    for (uint64_t x : v) u64(x);
  }
  std::string& bytes() { return out_; }

 private:
  void put(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string out_;
};

class byte_reader {
 public:
  byte_reader(const char* data, size_t size) : p_(data), end_(data + size) {}
  uint8_t u8() { return static_cast<uint8_t>(get(1)); }
  uint32_t u32() { return static_cast<uint32_t>(get(4)); }
  uint64_t u64() { return get(8); }
  int64_t i64() { return static_cast<int64_t>(get(8)); }
  std::string str() {
    uint32_t n = u32();
    if (!ok_ || size_t(end_ - p_) < n) return fail_str();
    std::string s(p_, n);
    p_ += n;
    return s;
  }
  std::vector<uint64_t> u64s() {
    uint32_t n = u32();
    // Each element is 8 bytes: a count larger than what is left is damage, not a request
    // to allocate.
    if (!ok_ || size_t(end_ - p_) / 8 < n) {
      ok_ = false;
      return {};
    }
    std::vector<uint64_t> v(n);
    for (auto& x : v) x = u64();
    return v;
  }
  bool ok() const { return ok_; }
  bool at_end() const { return p_ == end_; }
  size_t remaining() const { return size_t(end_ - p_); }

 private:
  uint64_t get(int n) {
    if (!ok_ || end_ - p_ < n) {
      ok_ = false;
      return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t(static_cast<unsigned char>(p_[i])) << (8 * i);
    p_ += n;
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

}  // namespace moerl::ledger::detail
