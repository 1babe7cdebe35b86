// The few pieces of S3's XML responses the backend reads (ListObjectsV2 keys and
// continuation, UploadId, Error Code/Message) and the one document it writes
// (CompleteMultipartUpload). S3's responses are flat and machine-generated, so a tag
// scanner with entity decoding suffices; no general XML parser is linked for it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moerl::store {

// Text of the first <tag>…</tag> element (exact tag name, no attributes), decoded.
std::optional<std::string> xml_first(std::string_view doc, std::string_view tag);
// Texts of every <tag>…</tag> element, in document order, decoded.
std::vector<std::string> xml_all(std::string_view doc, std::string_view tag);

// &amp; &lt; &gt; &quot; &apos; and numeric references (&#N; &#xH;, encoded as UTF-8).
std::string xml_decode(std::string_view text);
std::string xml_encode(std::string_view text);

}  // namespace moerl::store
