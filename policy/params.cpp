#include "policy/params.h"

// Header-only (libxxhash-dev): nothing to link, so every target that builds params.cpp has it.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "common/byte_codec.h"

namespace moerl::policy {
namespace {

constexpr char kMagic[8] = {'M', 'O', 'E', 'R', 'L', 'P', 'A', 'R'};
constexpr uint32_t kFormatVersion = 1;

error malformed(const std::string& what) {
  return {errc::malformed_message, "parameter bytes: " + what};
}

}  // namespace

size_t tensor_spec::size() const {
  size_t n = 1;
  for (int64_t d : dims) n *= static_cast<size_t>(d);
  return n;
}

size_t param_layout::add(const std::string& name, std::vector<int64_t> dims) {
  tensor_spec t;
  t.name = name;
  t.dims = std::move(dims);
  t.offset = num_floats_;
  num_floats_ += t.size();
  tensors_.push_back(std::move(t));
  return tensors_.back().offset;
}

const tensor_spec* param_layout::find(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

bool param_layout::operator==(const param_layout& o) const {
  if (tensors_.size() != o.tensors_.size()) return false;
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (tensors_[i].name != o.tensors_[i].name || tensors_[i].dims != o.tensors_[i].dims)
      return false;
  return true;
}

std::string serialize_params(const param_layout& layout, const std::vector<float>& data) {
  byte_writer w;
  w.raw(kMagic, sizeof kMagic);
  w.u32(kFormatVersion);
  w.u32(static_cast<uint32_t>(layout.tensors().size()));
  for (const auto& t : layout.tensors()) {
    w.str(t.name);
    w.u32(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) w.u64(static_cast<uint64_t>(d));
  }
  w.u64(static_cast<uint64_t>(data.size()));
  w.f32s(data.data(), data.size());
  return std::move(w.bytes());
}

result<std::vector<float>> deserialize_params(const std::string& bytes,
                                              const param_layout* expected,
                                              param_layout* layout_out) {
  byte_reader r(bytes.data(), bytes.size());
  if (r.raw(sizeof kMagic) != std::string(kMagic, sizeof kMagic))
    return malformed("does not start with MOERLPAR");
  const uint32_t version = r.u32();
  if (!r.ok()) return malformed("truncated before the format version");
  if (version != kFormatVersion)
    return malformed("format version " + std::to_string(version) + " is not 1");
  const uint32_t num_tensors = r.u32();
  if (!r.ok()) return malformed("truncated before the tensor count");
  param_layout layout;
  for (uint32_t i = 0; i < num_tensors; ++i) {
    std::string name = r.str();
    const uint32_t rank = r.u32();
    if (!r.ok()) return malformed("truncated inside the header of tensor " + std::to_string(i));
    if (rank > 8) return malformed("tensor '" + name + "' has rank " + std::to_string(rank));
    std::vector<int64_t> dims(rank);
    for (auto& d : dims) {
      const uint64_t v = r.u64();
      if (!r.ok()) return malformed("truncated inside the dims of tensor '" + name + "'");
      if (v > (1ull << 31)) return malformed("tensor '" + name + "' has a dimension too large");
      d = static_cast<int64_t>(v);
    }
    layout.add(name, std::move(dims));
  }
  const uint64_t num_floats = r.u64();
  if (!r.ok()) return malformed("truncated before the element count");
  if (num_floats != layout.num_floats())
    return malformed("element count " + std::to_string(num_floats) + " does not match the " +
                     std::to_string(layout.num_floats()) + " the tensors declare");
  if (r.remaining() != num_floats * sizeof(float))
    return malformed("holds " + std::to_string(r.remaining()) + " data bytes, expected " +
                     std::to_string(num_floats * sizeof(float)));
  if (expected) {
    if (!(layout == *expected)) {
      std::string where = "tensor count differs";
      for (size_t i = 0; i < layout.tensors().size() && i < expected->tensors().size(); ++i) {
        if (layout.tensors()[i].name != expected->tensors()[i].name ||
            layout.tensors()[i].dims != expected->tensors()[i].dims) {
          where = "tensor " + std::to_string(i) + " is '" + layout.tensors()[i].name +
                  "', the model expects '" + expected->tensors()[i].name + "' of another shape";
          break;
        }
      }
      return error{errc::invalid_argument, "parameters do not fit this model: " + where};
    }
  }
  std::vector<float> data(num_floats);
  r.f32s(data.data(), data.size());
  if (layout_out) *layout_out = std::move(layout);
  return data;
}

uint64_t fnv1a64(const void* data, size_t size, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string content_hash(const std::string& bytes) {
  static const char* hex = "0123456789abcdef";
  uint64_t h = XXH3_64bits(bytes.data(), bytes.size());
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4) out[i] = hex[h & 0xf];
  return out;
}

}  // namespace moerl::policy
