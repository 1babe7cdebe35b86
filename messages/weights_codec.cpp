#include "messages/detail/frame.h"
#include "messages/weights.capnp.h"
#include "messages/weights.h"

namespace moerl::messages {
using namespace detail;

template <>
std::string encode(const weight_manifest& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<schema::WeightManifest>();
  r.setVersion(m.version);
  r.setContentHash(text(m.content_hash));
  r.setTotalBytes(m.total_bytes);
  auto parts = r.initParts(m.parts.size());
  for (unsigned i = 0; i < m.parts.size(); ++i) {
    parts[i].setName(text(m.parts[i].name));
    parts[i].setOffset(m.parts[i].offset);
    parts[i].setBytes(m.parts[i].bytes);
    parts[i].setSha256(text(m.parts[i].sha256));
  }
  r.setCreatedUnixMs(m.created_unix_ms);
  return frame(kind::weight_manifest, b);
}

template <>
result<weight_manifest> decode(const void* data, size_t size, const decode_limits& lim) {
  return decode_frame<schema::WeightManifest, weight_manifest>(
      kind::weight_manifest, data, size, lim,
      [](schema::WeightManifest::Reader r, weight_manifest& m) -> status {
        m.version = r.getVersion();
        m.content_hash = str(r.getContentHash());
        m.total_bytes = r.getTotalBytes();
        uint64_t sum = 0;
        for (auto p : r.getParts()) {
          weight_part part{str(p.getName()), p.getOffset(), p.getBytes(), str(p.getSha256())};
          if (part.bytes > m.total_bytes - sum)
            return error{errc::malformed_message,
                         "weight_manifest: parts add up to more than total_bytes"};
          sum += part.bytes;
          m.parts.push_back(std::move(part));
        }
        if (sum != m.total_bytes)
          return error{errc::malformed_message,
                       "weight_manifest: parts add up to " + std::to_string(sum) +
                           " bytes, total_bytes is " + std::to_string(m.total_bytes)};
        m.created_unix_ms = r.getCreatedUnixMs();
        return {};
      });
}

}  // namespace moerl::messages
