#include <gtest/gtest.h>

#include <capnp/schema.h>

#include <cmath>
#include <set>

#include "messages/all.h"
#include "messages/error.capnp.h"
#include "sample_messages.h"

using namespace moerl;
using namespace moerl::messages;

TEST(codec, every_kind_has_an_example_and_round_trips_to_identical_bytes) {
  std::set<kind> seen;
  for (const auto& ex : examples::all_examples()) {
    seen.insert(ex.k);
    auto k = peek_kind(ex.bytes.data(), ex.bytes.size());
    ASSERT_TRUE(k.ok()) << kind_name(ex.k);
    EXPECT_EQ(*k, ex.k);
    EXPECT_EQ(ex.decode(ex.bytes).code, errc::ok) << kind_name(ex.k);
  }
  EXPECT_EQ(seen.size(), kMaxKind);
}

TEST(codec, sample_fields_survive_including_negative_zero_and_nan_logprobs) {
  sample s = examples::make_sample(5);
  s.logprobs = {-0.0f, std::nanf(""), -INFINITY};
  s.generate_us = 4'000'000'000u;
  s.reward_us = 17;
  auto back = decode<sample>(encode(s));
  ASSERT_TRUE(back.ok()) << back.err().to_string();
  EXPECT_EQ(back->seq, 5u);
  EXPECT_EQ(back->tokens, s.tokens);
  EXPECT_EQ(back->prompt_tokens, s.prompt_tokens);
  EXPECT_TRUE(std::signbit(back->logprobs[0]));
  EXPECT_TRUE(std::isnan(back->logprobs[1]));
  EXPECT_TRUE(std::isinf(back->logprobs[2]));
  EXPECT_EQ(back->worker, "rollout-1");
  EXPECT_EQ(back->generate_us, 4'000'000'000u);
  EXPECT_EQ(back->reward_us, 17u);
  EXPECT_EQ(encode(*back), encode(s));
}

TEST(codec, lease_keeps_its_fencing_token_and_unit) {
  lease l{{17, {1, 2}, 4, 99, "add"}, 6, "rollout-3", 5555, 12, "buffer-1", "tcp://10.0.0.7:5601"};
  auto back = decode<lease>(encode(l));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->attempt, 6u);
  EXPECT_EQ(back->unit.group_ids, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(back->unit.task, "add");
  EXPECT_EQ(back->deadline_unix_ms, 5555u);
}

TEST(codec, sample_with_mismatched_logprobs_is_refused_by_name) {
  sample s = examples::make_sample(0);
  s.logprobs.pop_back();
  auto r = decode<sample>(encode(s));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::malformed_message);
  EXPECT_NE(r.err().message.find("logprobs"), std::string::npos);
}

TEST(codec, weight_manifest_whose_parts_do_not_add_up_is_refused) {
  weight_manifest wm{1, "h", 100, {{"p0", 0, 60, "x"}}, 0};
  auto r = decode<weight_manifest>(encode(wm));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.err().message.find("total_bytes"), std::string::npos);
}

TEST(codec, decoding_as_the_wrong_kind_names_both_kinds) {
  auto bytes = encode(credit{"t", 3});
  auto r = decode<sample>(bytes);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::malformed_message);
  EXPECT_NE(r.err().message.find("credit"), std::string::npos);
  EXPECT_NE(r.err().message.find("sample"), std::string::npos);
}

TEST(codec, truncated_oversized_and_garbage_frames_get_distinct_codes) {
  const std::string bytes = encode(examples::make_sample(1));
  EXPECT_EQ(decode<sample>(bytes.substr(0, 4)).err().code, errc::truncated_message);
  EXPECT_EQ(decode<sample>(bytes.substr(0, bytes.size() - 8)).err().code, errc::truncated_message);
  EXPECT_EQ(decode<sample>(bytes.substr(0, bytes.size() - 3)).err().code, errc::truncated_message);
  decode_limits small;
  small.max_bytes = 32;
  EXPECT_EQ(decode<sample>(bytes, small).err().code, errc::message_too_large);
  EXPECT_EQ(decode<sample>(std::string(64, 'x')).err().code, errc::malformed_message);
  EXPECT_EQ(decode<sample>(bytes + std::string(8, '\0')).err().code, errc::malformed_message);
  EXPECT_EQ(decode<sample>(nullptr, 0).err().code, errc::truncated_message);
}

TEST(codec, traversal_limit_bounds_the_work_of_a_message) {
  batch b;
  for (uint32_t i = 0; i < 64; ++i) b.samples.push_back(examples::make_sample(i));
  decode_limits tight;
  tight.traversal_limit_words = 16;
  auto r = decode<batch>(encode(b), tight);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::malformed_message);
}

// The Cap'n Proto enum must mirror moerl::errc value for value and name for name.
TEST(codec, schema_error_codes_mirror_errc) {
  auto enumerants = capnp::Schema::from<schema::ErrorCode>().getEnumerants();
  ASSERT_EQ(enumerants.size(), static_cast<unsigned>(errc::internal) + 1);
  for (auto e : enumerants) {
    std::string camel = e.getProto().getName();
    std::string snake;
    for (char c : camel) {
      if (std::isupper(static_cast<unsigned char>(c))) {
        snake += '_';
        snake += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      } else {
        snake += c;
      }
    }
    EXPECT_EQ(snake, errc_name(static_cast<errc>(e.getOrdinal()))) << camel;
  }
}
