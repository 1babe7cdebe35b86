// Feeds random and mutated byte strings to every decoder. Run under ASan/UBSan by CI
// (build-asan). Passes when nothing crashes or hangs and every failure is a clean error.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "messages/all.h"
#include "sample_messages.h"

using namespace moerl;
using namespace moerl::messages;

namespace {

size_t iterations_per_kind() {
  if (const char* env = std::getenv("MOERL_FUZZ_ITERATIONS"))
    return std::strtoull(env, nullptr, 10);
  return 100000;
}

std::string mutate(const std::string& valid, std::mt19937_64& rng) {
  std::string s = valid;
  const int op = static_cast<int>(rng() % 8);
  auto pos = [&](size_t n) { return n ? rng() % n : 0; };
  switch (op) {
    case 0:  // flip a few bits
      for (int i = 0, n = 1 + rng() % 4; i < n && !s.empty(); ++i)
        s[pos(s.size())] ^= char(1u << (rng() % 8));
      break;
    case 1:  // overwrite a byte with a boundary value
      if (!s.empty()) s[pos(s.size())] = "\x00\x01\x7f\x80\xff"[rng() % 5];
      break;
    case 2:  // truncate
      s.resize(pos(s.size() + 1));
      break;
    case 3:  // extend with random bytes
      for (int i = 0, n = 1 + rng() % 32; i < n; ++i) s.push_back(char(rng()));
      break;
    case 4:  // corrupt the segment table (first words after the 8-byte header)
      if (s.size() >= 16)
        for (int i = 8; i < 16; ++i)
          if (rng() % 3 == 0) s[i] = char(rng());
      break;
    case 5:  // corrupt a 64-bit pointer-sized word with random bits
      if (s.size() >= 16) {
        size_t w = 8 + 8 * pos((s.size() - 8) / 8);
        for (size_t i = w; i < w + 8 && i < s.size(); ++i) s[i] = char(rng());
      }
      break;
    case 6:  // swap the kind in the header
      if (s.size() >= 6) {
        s[4] = char(rng() % 20);
        s[5] = char(rng() % 2 ? 0 : rng());
      }
      break;
    default:  // duplicate a chunk
      if (!s.empty()) {
        size_t a = pos(s.size());
        s.insert(a, s.substr(a, 1 + rng() % 16));
      }
      break;
  }
  return s;
}

bool is_clean_decode_error(const moerl::error& e) {
  return (e.code == errc::malformed_message || e.code == errc::truncated_message ||
          e.code == errc::message_too_large) &&
         !e.message.empty();
}

}  // namespace

TEST(codec_fuzz, random_and_mutated_inputs_yield_values_or_clean_errors) {
  const size_t n = iterations_per_kind();
  std::mt19937_64 rng(20261129);
  for (const auto& ex : examples::all_examples()) {
    size_t ok = 0, failed = 0;
    for (size_t i = 0; i < n; ++i) {
      std::string input;
      if (i % 4 == 0) {  // pure random, sometimes with a valid header so the payload is reached
        input.resize(rng() % 256);
        for (auto& c : input) c = char(rng());
        if (i % 8 == 0 && input.size() >= 8) input.replace(0, 8, ex.bytes.substr(0, 8));
      } else {
        input = mutate(ex.bytes, rng);
        if (i % 3 == 0) input = mutate(input, rng);
      }
      const moerl::error e = ex.decode(input);
      if (e.code == errc::ok) {
        ++ok;
      } else {
        ++failed;
        ASSERT_TRUE(is_clean_decode_error(e)) << kind_name(ex.k) << ": " << e.to_string();
      }
    }
    EXPECT_EQ(ok + failed, n);
    EXPECT_GT(failed, 0u) << kind_name(ex.k);
    std::printf("fuzz %-20s %zu inputs: %zu decoded, %zu refused cleanly\n", kind_name(ex.k), n, ok,
                failed);
  }
}
