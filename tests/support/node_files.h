// What a multi-process test reads of its node processes: they report through files in a
// directory the test made (network namespaces share the filesystem, not the loopback), each
// written whole (to a temporary name, then renamed), so the test waits for a file to exist
// and then reads it as JSON.
#pragma once

#ifndef MOERL_TEST_CODE
#error \
    "tests/support/node_files.h is test code: production code (benches too) must not include tests/"
#endif

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

namespace moerl::testing {

// True once `cond` holds, false if it still does not after `limit` (polled every 10 ms).
inline bool wait_until(const std::function<bool()>& cond, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

inline bool wait_file(const std::filesystem::path& p, std::chrono::milliseconds limit) {
  return wait_until([&] { return std::filesystem::exists(p); }, limit);
}

// The file's JSON; a discarded value (is_discarded()) when it is absent or not JSON.
inline nlohmann::json read_json_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return nlohmann::json::parse(s.str(), nullptr, false);
}

}  // namespace moerl::testing
