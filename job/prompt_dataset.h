// Prompts from a dataset file in the object store (task.dataset, in task.dataset_store or
// store.url): JSON Lines, one row a line, read and turned into token prompts once per node.
// Which row a prompt group gets is a pure function of (the dataset's rows, the group id), so
// every node that reads the same file rebuilds the same prompt.
//
// Rows, by task:
//   sort, add  {"prompt": "^s314="}  the prompt as text in the policy's vocabulary; it must
//                                    be a prompt of the task at task.difficulty
//   guess      {"hidden": 7}         the number the environment hides (0..9); the prompt is
//                                    the task's "^T=" and the episode runs on an env node
// Blank lines are skipped. A row that does not parse is left out with an error naming the
// file and the line (bad_rows; the node logs them and goes on serving the good rows); a
// dataset with no good row at all is an error.
//
// Thread-safety: immutable once loaded; any thread may read it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "policy/task.h"
#include "policy/vocab.h"
#include "store/object_store.h"

namespace moerl::job {

struct dataset_row {
  std::vector<policy::token_id> prompt;  // single-turn tasks
  int hidden = -1;                       // guess: the hidden number
};

struct prompt_dataset {
  std::string origin;  // "s3://bucket/prefix/key" or "file:///dir/key", for messages
  std::vector<dataset_row> rows;
  std::vector<std::string> bad_rows;  // "ORIGIN:LINE: what is wrong", in file order
  // The row of group (or episode seed) `key`: rows[key % rows.size()], so consecutive group
  // ids walk the file in order and wrap around (epochs).
  const dataset_row& row_of(uint64_t key) const { return rows[key % rows.size()]; }
};

// Parses JSONL text. `task` is the single-turn task the rows are prompts of; null for guess.
result<prompt_dataset> parse_prompt_dataset(const std::string& text, const std::string& origin,
                                            const policy::task* task);
// Reads `key` from `store` and parses it; errc::not_found names the object when it is absent.
result<prompt_dataset> load_prompt_dataset(const store::object_store& store, const std::string& key,
                                           const policy::task* task);

// The dataset the config names (task.dataset in task.dataset_store, else store.url), with
// every bad row logged; null when task.dataset is "" (generated prompts).
result<std::shared_ptr<const prompt_dataset>> open_task_dataset(const config& cfg,
                                                                const policy::task* task);

}  // namespace moerl::job
