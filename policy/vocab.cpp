#include "policy/vocab.h"

namespace moerl::policy {
namespace {
// Index = token id.
constexpr char kChars[num_vocab + 1] = "_^$0123456789+=s";
}  // namespace

result<std::vector<token_id>> encode(const std::string& text) {
  std::vector<token_id> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    token_id id = -1;
    for (int v = 0; v < num_vocab; ++v)
      if (kChars[v] == text[i]) id = v;
    if (id < 0)
      return error{errc::invalid_argument, "unknown character '" + std::string(1, text[i]) +
                                               "' at offset " + std::to_string(i) +
                                               " (vocabulary: " + kChars + ")"};
    out.push_back(id);
  }
  return out;
}

std::string decode(const std::vector<token_id>& tokens) {
  std::string out;
  out.reserve(tokens.size());
  for (token_id t : tokens) out.push_back(t >= 0 && t < num_vocab ? kChars[t] : '?');
  return out;
}

}  // namespace moerl::policy
