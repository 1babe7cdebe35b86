// The MOERLADM codec (policy/adam.h): the one reader and writer of Adam's checkpoint state,
// used by adam::serialize/load and by the trainer ranks' slicing (job/param_slicing.cpp).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "policy/adam.h"

namespace moerl::policy {
namespace {

const std::vector<float> kM = {0.5f, -1.25f, 3.0e-8f, 0.0f, 7.0f};
const std::vector<float> kV = {0.25f, 1.5625f, 9.0e-16f, 0.0f, 49.0f};

// How job/param_slicing.cpp wrote the format before it used this codec: the host's bytes of
// each field, copied as they are.
std::string written_with_host_memcpy(uint64_t steps, const std::vector<float>& m,
                                     const std::vector<float>& v) {
  std::string out("MOERLADM", 8);
  const uint64_t n = m.size();
  out.append(reinterpret_cast<const char*>(&steps), 8);
  out.append(reinterpret_cast<const char*>(&n), 8);
  out.append(reinterpret_cast<const char*>(m.data()), n * 4);
  out.append(reinterpret_cast<const char*>(v.data()), n * 4);
  return out;
}

TEST(adam_state_codec, writes_the_documented_little_endian_layout_and_reads_it_back) {
  const std::string b = write_adam_state(0x0102030405060708ull, kM, kV);
  ASSERT_EQ(b.size(), 24u + 2 * kM.size() * 4);
  EXPECT_EQ(b.substr(0, 8), "MOERLADM");
  // steps, least significant byte first
  EXPECT_EQ(std::vector<unsigned char>(b.begin() + 8, b.begin() + 16),
            (std::vector<unsigned char>{8, 7, 6, 5, 4, 3, 2, 1}));
  EXPECT_EQ(static_cast<unsigned char>(b[16]), kM.size());
  // 0.5f is 0x3f000000: the first moment's last byte is its top byte.
  EXPECT_EQ(std::vector<unsigned char>(b.begin() + 24, b.begin() + 28),
            (std::vector<unsigned char>{0x00, 0x00, 0x00, 0x3f}));

  auto s = read_adam_state(b);
  ASSERT_TRUE(s.ok()) << s.err().to_string();
  EXPECT_EQ(s->steps, 0x0102030405060708ull);
  EXPECT_EQ(s->m, kM);
  EXPECT_EQ(s->v, kV);
}

TEST(adam_state_codec, reads_what_the_trainer_slicing_wrote_before_with_host_memcpy) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
                "the old writer's bytes equal the format's on little-endian hosts only");
  const std::string old_bytes = written_with_host_memcpy(17, kM, kV);
  auto s = read_adam_state(old_bytes);
  ASSERT_TRUE(s.ok()) << s.err().to_string();
  EXPECT_EQ(s->steps, 17u);
  EXPECT_EQ(s->m, kM);
  EXPECT_EQ(s->v, kV);
  EXPECT_TRUE(write_adam_state(s->steps, s->m, s->v) == old_bytes);

  // adam::load takes them too and writes the same bytes back.
  adam opt(adam_config{}, kM.size());
  ASSERT_TRUE(opt.load(old_bytes).ok());
  EXPECT_EQ(opt.num_steps(), 17);
  EXPECT_TRUE(opt.serialize() == old_bytes);
}

TEST(adam_state_codec, an_empty_state_round_trips) {
  const std::string b = write_adam_state(3, {}, {});
  EXPECT_EQ(b.size(), 24u);
  auto s = read_adam_state(b);
  ASSERT_TRUE(s.ok()) << s.err().to_string();
  EXPECT_EQ(s->steps, 3u);
  EXPECT_TRUE(s->m.empty() && s->v.empty());
}

TEST(adam_state_codec, refuses_damaged_bytes_as_malformed) {
  const std::string good = write_adam_state(2, kM, kV);
  auto expect_malformed = [](const std::string& bytes, const char* what) {
    auto s = read_adam_state(bytes);
    ASSERT_FALSE(s.ok()) << what;
    EXPECT_EQ(s.err().code, errc::malformed_message) << what;
    EXPECT_NE(s.err().message.find("optimiser state"), std::string::npos) << s.err().message;
  };
  expect_malformed("", "empty");
  expect_malformed("MOERLADMshort", "header cut short");
  expect_malformed("MOERLADX" + good.substr(8), "another magic");
  expect_malformed(good.substr(0, good.size() - 1), "a moment cut short");
  expect_malformed(good + '\0', "a byte too many");
  // A count so large that n * 8 wraps around to the real payload size.
  std::string wrapped = good;
  const uint64_t huge = (uint64_t(1) << 61) + kM.size();
  std::memcpy(&wrapped[16], &huge, 8);
  expect_malformed(wrapped, "a count that wraps");
}

}  // namespace
}  // namespace moerl::policy
