// Prompt datasets (job/prompt_dataset.h): rows of each shipped task parse into prompts the
// task accepts, a bad row is left out with its file and line named while the good rows stay,
// the row of a group is a pure function of (rows, group id), and the file is read through
// the object store: a local directory, and S3 (moto's server, started as tests/store's S3
// tests start it; skipped the same way when moto is absent).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "env/env_api.h"
#include "job/multi_turn.h"
#include "job/prompt_dataset.h"
#include "moto_server.h"
#include "policy/tasks/guess.h"
#include "store/object_store.h"
#include "tests/support/temp_dir.h"

namespace moerl::job {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(prompt_dataset, shipped_datasets_parse_without_a_bad_row) {
  auto sort = policy::make_task("sort", 3);
  auto add = policy::make_task("add", 3);
  ASSERT_TRUE(sort.ok() && add.ok());
  const std::string dir = MOERL_DATASET_DIR;
  for (auto [file, task] :
       {std::pair<const char*, const policy::task*>{"sort-3.jsonl", sort->get()},
        {"add-3.jsonl", add->get()},
        {"guess.jsonl", nullptr}}) {
    auto d = parse_prompt_dataset(read_file(dir + "/" + file), file, task);
    ASSERT_TRUE(d.ok()) << d.err().to_string();
    EXPECT_TRUE(d->bad_rows.empty()) << d->bad_rows[0];
    EXPECT_GE(d->rows.size(), 100u) << file;
  }
}

TEST(prompt_dataset, bad_rows_are_left_out_naming_file_and_line) {
  auto sort = policy::make_task("sort", 3);
  ASSERT_TRUE(sort.ok());
  const std::string text =
      "{\"prompt\": \"^s312=\"}\n"
      "not json\n"
      "\n"
      "{\"prompt\": \"^s31=\"}\n"      // wrong length for difficulty 3
      "{\"prompt\": \"^s3x2=\"}\n"     // not in the vocabulary
      "{\"text\": \"^s312=\"}\n"       // no prompt field
      "{\"prompt\": \"^s987=\"}\r\n";  // CRLF is fine
  auto d = parse_prompt_dataset(text, "mine.jsonl", sort->get());
  ASSERT_TRUE(d.ok()) << d.err().to_string();
  ASSERT_EQ(d->rows.size(), 2u);
  EXPECT_EQ(policy::decode(d->rows[1].prompt), "^s987=");
  ASSERT_EQ(d->bad_rows.size(), 4u);
  EXPECT_EQ(d->bad_rows[0], "mine.jsonl:2: not a JSON object");
  EXPECT_EQ(d->bad_rows[1].rfind("mine.jsonl:4: sort prompt", 0), 0u) << d->bad_rows[1];
  EXPECT_EQ(d->bad_rows[2].rfind("mine.jsonl:5: unknown character 'x'", 0), 0u) << d->bad_rows[2];
  EXPECT_EQ(d->bad_rows[3].rfind("mine.jsonl:6: a sort row is {\"prompt\"", 0), 0u)
      << d->bad_rows[3];

  auto guess = parse_prompt_dataset("{\"hidden\": 3}\n{\"hidden\": 12}\n{\"hidden\": \"4\"}\n",
                                    "g.jsonl", nullptr);
  ASSERT_TRUE(guess.ok());
  ASSERT_EQ(guess->rows.size(), 1u);
  EXPECT_EQ(guess->bad_rows[0], "g.jsonl:2: hidden 12 is outside 0..9");
  EXPECT_EQ(guess->bad_rows[1], "g.jsonl:3: a guess row is {\"hidden\": 0..9}");

  auto none = parse_prompt_dataset("oops\n", "empty.jsonl", nullptr);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.err().message.find("dataset empty.jsonl has no usable row; first: "
                                    "empty.jsonl:1: not a JSON object"),
            std::string::npos)
      << none.err().message;
}

TEST(prompt_dataset, the_row_of_a_group_is_a_pure_function_of_rows_and_group_id) {
  auto a =
      parse_prompt_dataset("{\"hidden\": 1}\n{\"hidden\": 2}\n{\"hidden\": 3}\n", "a", nullptr);
  auto b =
      parse_prompt_dataset("{\"hidden\": 1}\n{\"hidden\": 2}\n{\"hidden\": 3}\n", "b", nullptr);
  ASSERT_TRUE(a.ok() && b.ok());
  for (uint64_t g = 0; g < 10; ++g) {
    EXPECT_EQ(a->row_of(g).hidden, b->row_of(g).hidden);
    EXPECT_EQ(a->row_of(g).hidden, int(g % 3) + 1);
  }
}

TEST(prompt_dataset, guess_environment_hides_the_rows_number) {
  auto d = parse_prompt_dataset("{\"hidden\": 7}\n{\"hidden\": 0}\n", "g", nullptr);
  ASSERT_TRUE(d.ok());
  auto env = make_guess_environment(4, std::make_shared<prompt_dataset>(*d));
  // Seed 0 -> row 0 -> hidden 7: guessing 7 wins at once; seed 1 -> row 1 -> hidden 0.
  ASSERT_TRUE(env->reset(0).ok());
  auto won = env->step({uint32_t(policy::digit_token(7))});
  ASSERT_TRUE(won.ok());
  EXPECT_TRUE(won->done);
  EXPECT_EQ(won->reward, 1.0f);
  ASSERT_TRUE(env->reset(1).ok());
  auto lower = env->step({uint32_t(policy::digit_token(5))});
  ASSERT_TRUE(lower.ok());
  EXPECT_FALSE(lower->done);
  EXPECT_EQ(lower->tokens, std::vector<uint32_t>{uint32_t(policy::guess_reply_smaller)});
}

config config_with(const std::vector<std::pair<std::string, std::string>>& sets) {
  config c = config::defaults();
  for (const auto& [k, v] : sets) EXPECT_TRUE(c.set(k, v, "test").ok()) << k;
  return c;
}

TEST(prompt_dataset, read_through_a_local_store) {
  moerl::testing::temp_dir dir("dataset");
  auto store = store::open_store(dir.path(), config::defaults());
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->put("sets/guess.jsonl", "{\"hidden\": 5}\nbad\n").ok());
  auto d = open_task_dataset(
      config_with({{"task.dataset", "sets/guess.jsonl"}, {"task.dataset_store", dir.path()}}),
      nullptr);
  ASSERT_TRUE(d.ok()) << d.err().to_string();
  ASSERT_TRUE(*d);
  EXPECT_EQ((*d)->rows.size(), 1u);
  EXPECT_EQ((*d)->bad_rows.at(0),
            "file://" + dir.path() + "/sets/guess.jsonl:2: not a JSON object");
  // No key: generated prompts; a missing object: an error naming it.
  auto none = open_task_dataset(config_with({}), nullptr);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(*none);
  auto missing = open_task_dataset(
      config_with({{"task.dataset", "nope.jsonl"}, {"task.dataset_store", dir.path()}}), nullptr);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.err().code, errc::not_found);
  EXPECT_NE(missing.err().message.find("nope.jsonl"), std::string::npos) << missing.err().message;
}

TEST(prompt_dataset, read_through_s3) {
  MOERL_SKIP_TEST_WITHOUT_MOTO();
  auto server = store::testing::moto_server::start(
      std::string(MOERL_STORE_TEST_DIR) + "/moto_s3_server.py", 120000);
  ASSERT_TRUE(server.ok()) << server.err().to_string();
  const auto& info = (*server)->info();
  store::testing::export_credentials(info);
  const std::string url = "s3://" + info.bucket + "/datasets";
  const config cfg = config_with({{"store.s3_endpoint", info.endpoint},
                                  {"store.s3_region", info.region},
                                  {"task.dataset", "sort.jsonl"},
                                  {"task.dataset_store", url}});
  auto store = store::open_store(url, cfg);
  ASSERT_TRUE(store.ok()) << store.err().to_string();
  ASSERT_TRUE((*store)->put("sort.jsonl", "{\"prompt\": \"^s312=\"}\n{\"prompt\": 3}\n").ok());
  auto sort = policy::make_task("sort", 3);
  ASSERT_TRUE(sort.ok());
  auto d = open_task_dataset(cfg, sort->get());
  ASSERT_TRUE(d.ok()) << d.err().to_string();
  ASSERT_EQ((*d)->rows.size(), 1u);
  EXPECT_EQ(policy::decode((*d)->rows[0].prompt), "^s312=");
  ASSERT_EQ((*d)->bad_rows.size(), 1u);
  EXPECT_NE((*d)->bad_rows[0].find("sort.jsonl:2: a sort row is"), std::string::npos)
      << (*d)->bad_rows[0];
  EXPECT_EQ((*d)->bad_rows[0].rfind("s3://", 0), 0u) << (*d)->bad_rows[0];
}

}  // namespace
}  // namespace moerl::job
