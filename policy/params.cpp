#include "policy/params.h"

#include <cstring>

namespace moerl::policy {
namespace {

constexpr char kMagic[8] = {'M', 'O', 'E', 'R', 'L', 'P', 'A', 'R'};
constexpr uint32_t kFormatVersion = 1;

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

// Reads fixed-size values off the front of a byte string; every read is bounds-checked so a
// truncated or hostile file yields an error instead of reading past the end.
class reader {
 public:
  explicit reader(const std::string& b) : b_(b) {}
  template <class T>
  bool get(T* v) {
    if (b_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool get_bytes(size_t n, std::string* out) {
    if (b_.size() - pos_ < n) return false;
    out->assign(b_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  size_t remaining() const { return b_.size() - pos_; }
  const char* here() const { return b_.data() + pos_; }
  void skip(size_t n) { pos_ += n; }

 private:
  const std::string& b_;
  size_t pos_ = 0;
};

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
  std::string out(kMagic, sizeof kMagic);
  put<uint32_t>(out, kFormatVersion);
  put<uint32_t>(out, static_cast<uint32_t>(layout.tensors().size()));
  for (const auto& t : layout.tensors()) {
    put<uint32_t>(out, static_cast<uint32_t>(t.name.size()));
    out += t.name;
    put<uint32_t>(out, static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) put<uint64_t>(out, static_cast<uint64_t>(d));
  }
  put<uint64_t>(out, static_cast<uint64_t>(data.size()));
  out.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
  return out;
}

result<std::vector<float>> deserialize_params(const std::string& bytes,
                                              const param_layout* expected,
                                              param_layout* layout_out) {
  reader r(bytes);
  std::string magic;
  if (!r.get_bytes(sizeof kMagic, &magic) || std::memcmp(magic.data(), kMagic, sizeof kMagic))
    return malformed("does not start with MOERLPAR");
  uint32_t version = 0, num_tensors = 0;
  if (!r.get(&version)) return malformed("truncated before the format version");
  if (version != kFormatVersion)
    return malformed("format version " + std::to_string(version) + " is not 1");
  if (!r.get(&num_tensors)) return malformed("truncated before the tensor count");
  param_layout layout;
  for (uint32_t i = 0; i < num_tensors; ++i) {
    uint32_t name_len = 0, rank = 0;
    std::string name;
    if (!r.get(&name_len) || !r.get_bytes(name_len, &name) || !r.get(&rank))
      return malformed("truncated inside the header of tensor " + std::to_string(i));
    if (rank > 8) return malformed("tensor '" + name + "' has rank " + std::to_string(rank));
    std::vector<int64_t> dims(rank);
    for (auto& d : dims) {
      uint64_t v = 0;
      if (!r.get(&v)) return malformed("truncated inside the dims of tensor '" + name + "'");
      if (v > (1ull << 31)) return malformed("tensor '" + name + "' has a dimension too large");
      d = static_cast<int64_t>(v);
    }
    layout.add(name, std::move(dims));
  }
  uint64_t num_floats = 0;
  if (!r.get(&num_floats)) return malformed("truncated before the element count");
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
  std::memcpy(data.data(), r.here(), num_floats * sizeof(float));
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
  uint64_t h = fnv1a64(bytes.data(), bytes.size());
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4) out[i] = hex[h & 0xf];
  return out;
}

}  // namespace moerl::policy
