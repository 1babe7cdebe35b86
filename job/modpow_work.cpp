#include "job/modpow_work.h"

namespace moerl::job {

using actors::generated_sample;
namespace {

uint64_t mix(uint64_t x) {  // splitmix64 finalizer: a cheap, well-spread hash
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t pow_left_to_right(uint64_t base, uint64_t exp, uint64_t mod) {
  uint64_t r = 1 % mod;
  for (int bit = 63; bit >= 0; --bit) {
    r = (r * r) % mod;
    if ((exp >> bit) & 1) r = (r * base) % mod;
  }
  return r;
}

uint64_t pow_right_to_left(uint64_t base, uint64_t exp, uint64_t mod) {
  uint64_t r = 1 % mod, b = base % mod;
  while (exp) {
    if (exp & 1) r = (r * b) % mod;
    b = (b * b) % mod;
    exp >>= 1;
  }
  return r;
}

status check_prompt(const std::vector<uint32_t>& p) {
  if (p.size() != 4)
    return error(errc::invalid_argument,
                 "modpow prompt needs 4 tokens, got " + std::to_string(p.size()));
  if (p[2] < 2 || p[2] > 0x7fffffffu || p[3] < 1 || p[3] > 4096)
    return error(errc::invalid_argument,
                 "modpow prompt out of range (modulus >= 2, 1 <= rounds <= 4096)");
  return ok_status();
}

}  // namespace

std::vector<uint32_t> modpow_prompt(uint64_t unit, uint32_t group, uint32_t rounds) {
  uint64_t h = mix(unit * 1315423911ull + group);
  uint32_t modulus = static_cast<uint32_t>(1000003 + (h % 1000000));  // < 2^31, products fit u64
  uint32_t seed = static_cast<uint32_t>(2 + (mix(h) % (modulus - 3)));
  uint32_t exponent = static_cast<uint32_t>(65537 + (mix(h + 1) % 1000000));
  return {seed, exponent, modulus, rounds};
}

result<generated_sample> modpow_work::generate(const std::vector<uint32_t>& prompt, uint32_t group,
                                               uint32_t index_in_group, uint64_t policy_version) {
  if (auto st = check_prompt(prompt); !st) return st.err();
  generated_sample s;
  s.group = group;
  s.index_in_group = index_in_group;
  s.prompt = prompt;
  uint64_t mod = static_cast<uint64_t>(prompt[2]);
  uint64_t h = mix(static_cast<uint64_t>(prompt[0]) ^ (uint64_t(index_in_group) << 32) ^
                   mix(policy_version));
  bool slips = h % 3 == 0;
  uint32_t slip_round = static_cast<uint32_t>((h >> 8) % static_cast<uint64_t>(prompt[3]));
  uint64_t x = static_cast<uint64_t>(prompt[0]);
  s.tokens.reserve(prompt[3]);
  s.logprobs.reserve(prompt[3]);
  for (uint32_t r = 0; r < prompt[3]; ++r) {
    x = pow_left_to_right(x, static_cast<uint64_t>(prompt[1]), mod);
    if (slips && r == slip_round) x = (x + 1) % mod;
    s.tokens.push_back(static_cast<uint32_t>(x));
    // A made-up but deterministic log-probability, always finite and <= 0.
    s.logprobs.push_back(-static_cast<float>(x % 1000) / 1000.0f);
  }
  return s;
}

result<float> modpow_reward::score(const std::vector<uint32_t>& prompt,
                                   const std::vector<uint32_t>& tokens) const {
  if (auto st = check_prompt(prompt); !st) return st.err();
  if (tokens.size() != static_cast<size_t>(prompt[3]))
    return error(errc::invalid_argument, "modpow response has " + std::to_string(tokens.size()) +
                                             " tokens, prompt asks for " +
                                             std::to_string(prompt[3]));
  uint64_t x = static_cast<uint64_t>(prompt[0]);
  for (uint32_t r = 0; r < prompt[3]; ++r)
    x = pow_right_to_left(x, static_cast<uint64_t>(prompt[1]), static_cast<uint64_t>(prompt[2]));
  return tokens.back() == static_cast<uint32_t>(x) ? 1.0f : 0.0f;
}

bool modpow_check(const generated_sample& s, uint64_t policy_version) {
  modpow_work w;
  auto again = w.generate(s.prompt, s.group, s.index_in_group, policy_version);
  return again && again->tokens == s.tokens && again->logprobs == s.logprobs;
}

}  // namespace moerl::job
