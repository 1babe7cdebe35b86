#include "store/s3_xml.h"

#include <cstdint>
#include <cstdlib>

namespace moerl::store {

namespace {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

// Finds elements from `from`; returns the decoded text and moves `from` past the element.
std::optional<std::string> next_element(std::string_view doc, std::string_view tag, size_t& from) {
  const std::string open = "<" + std::string(tag) + ">";
  const std::string close = "</" + std::string(tag) + ">";
  const size_t b = doc.find(open, from);
  if (b == std::string_view::npos) return std::nullopt;
  const size_t text_begin = b + open.size();
  const size_t e = doc.find(close, text_begin);
  if (e == std::string_view::npos) return std::nullopt;
  from = e + close.size();
  return xml_decode(doc.substr(text_begin, e - text_begin));
}

}  // namespace

std::string xml_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '&') {
      out += text[i];
      continue;
    }
    const size_t semi = text.find(';', i);
    if (semi == std::string_view::npos) {
      out += text[i];  // not an entity: keep the text as it came
      continue;
    }
    const std::string_view ent = text.substr(i + 1, semi - i - 1);
    if (ent == "amp")
      out += '&';
    else if (ent == "lt")
      out += '<';
    else if (ent == "gt")
      out += '>';
    else if (ent == "quot")
      out += '"';
    else if (ent == "apos")
      out += '\'';
    else if (ent.size() > 1 && ent[0] == '#') {
      const bool hex = ent[1] == 'x' || ent[1] == 'X';
      const std::string digits(ent.substr(hex ? 2 : 1));
      char* end = nullptr;
      const unsigned long cp = std::strtoul(digits.c_str(), &end, hex ? 16 : 10);
      if (digits.empty() || *end != '\0' || cp > 0x10ffff) {
        out.append(text.substr(i, semi - i + 1));
      } else {
        append_utf8(out, static_cast<uint32_t>(cp));
      }
    } else {
      out.append(text.substr(i, semi - i + 1));
    }
    i = semi;
  }
  return out;
}

std::string xml_encode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

std::optional<std::string> xml_first(std::string_view doc, std::string_view tag) {
  size_t from = 0;
  return next_element(doc, tag, from);
}

std::vector<std::string> xml_all(std::string_view doc, std::string_view tag) {
  std::vector<std::string> out;
  size_t from = 0;
  while (auto text = next_element(doc, tag, from)) out.push_back(std::move(*text));
  return out;
}

}  // namespace moerl::store
