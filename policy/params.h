// A model's parameters: named tensors laid out back to back in one flat fp32 buffer, so a
// gradient, an Adam moment or a weight version is one more buffer with the same layout.
//
// Byte format (little-endian on every host, common/byte_codec.h; what weight versions and
// checkpoints carry):
//   "MOERLPAR" | u32 format version (1) | u32 num_tensors
//   per tensor: u32 name length | name bytes | u32 rank | u64 dims[rank]
//   u64 num_floats | fp32 data[num_floats]
// content_hash() is XXH3-64 (xxhash, seed 0) over exactly these bytes, printed as 16 hex
// digits: an identity for weight versions, not a security measure (the weight plane's
// chunks and the checkpoints carry sha256 for that). It was byte-wise FNV-1a 64 until
// 2026-12-07: that ran at ~1 GB/s, ~2.5% of a default `moerl up`'s CPU (the trainer hashing
// each version, every rollout checking it); XXH3 runs at memory speed. Only one run's own
// announcements, manifests and store copies compare these hashes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"

namespace moerl::policy {

struct tensor_spec {
  std::string name;           // e.g. "layer0.attn.wqkv"
  std::vector<int64_t> dims;  // row-major
  size_t offset = 0;          // first element inside the flat buffer
  size_t size() const;
};

class param_layout {
 public:
  // Appends a tensor and returns its offset.
  size_t add(const std::string& name, std::vector<int64_t> dims);
  const std::vector<tensor_spec>& tensors() const { return tensors_; }
  const tensor_spec* find(const std::string& name) const;
  size_t num_floats() const { return num_floats_; }
  bool operator==(const param_layout& other) const;

 private:
  std::vector<tensor_spec> tensors_;
  size_t num_floats_ = 0;
};

std::string serialize_params(const param_layout& layout, const std::vector<float>& data);
// Parses bytes; errc::malformed_message names the field that is short or inconsistent.
// When `expected` is given, errc::invalid_argument names the first tensor whose name or
// shape differs from it.
result<std::vector<float>> deserialize_params(const std::string& bytes,
                                              const param_layout* expected,
                                              param_layout* layout_out = nullptr);

// FNV-1a 64: the model's parameter initialisation seeds each tensor from its name with it
// (model.cpp), so it stays as it is: changing it would change every initial weight.
uint64_t fnv1a64(const void* data, size_t size, uint64_t seed = 0xcbf29ce484222325ull);
std::string content_hash(const std::string& bytes);

}  // namespace moerl::policy
