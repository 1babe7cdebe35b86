// A config file as text, before YAML sees it: read whole, bounded in size, and checked to be
// UTF-8 without control characters (what YAML allows), so a binary or runaway file is refused
// at once with the offset and line of its first bad byte. And the one way config errors echo
// what they were given: printable, and short.
// Thread-safety: pure functions (read_config_text reads the file), safe from any thread.
#pragma once

#include <cstddef>
#include <string>

#include "common/error.h"

namespace moerl {

// Largest config file accepted. Every key of the schema with a comment each is a few KiB; a
// file this big is not a config file, and refusing it keeps `moerl config check` instant.
constexpr size_t kMaxConfigFileBytes = 256 * 1024;

// The file's bytes, or errc::invalid_config naming the path and what is wrong: cannot open,
// larger than kMaxConfigFileBytes, or "PATH:LINE: not YAML text: byte 0xNN at offset N is ..."
// for invalid UTF-8 or a control character other than tab, CR and LF.
result<std::string> read_config_text(const std::string& path);

// `text` for an error message: bytes that are not printable UTF-8 become \xNN, and more than
// 80 bytes are cut with "...", so no message carries raw binary or a megabyte of input.
std::string printable_excerpt(const std::string& text);

}  // namespace moerl
