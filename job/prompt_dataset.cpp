#include "job/prompt_dataset.h"

#include <sstream>

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "policy/tasks/guess.h"

namespace moerl::job {

namespace {

// One line -> one row, or what is wrong with it.
result<dataset_row> parse_row(const std::string& line, const policy::task* task) {
  const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return error{errc::invalid_argument, "not a JSON object"};
  dataset_row row;
  if (task == nullptr) {  // guess
    if (!j.contains("hidden") || !j["hidden"].is_number_integer())
      return error{errc::invalid_argument, "a guess row is {\"hidden\": 0..9}"};
    const int64_t h = j["hidden"].get<int64_t>();
    if (h < 0 || h > policy::guess_max_value)
      return error{errc::invalid_argument, "hidden " + std::to_string(h) + " is outside 0.." +
                                               std::to_string(policy::guess_max_value)};
    row.hidden = static_cast<int>(h);
    return row;
  }
  if (!j.contains("prompt") || !j["prompt"].is_string())
    return error{errc::invalid_argument,
                 "a " + task->name() + " row is {\"prompt\": \"<the prompt as text>\"}"};
  auto tokens = policy::encode(j["prompt"].get<std::string>());
  if (!tokens) return tokens.err();
  // The task's own check: a row must be a prompt the task can solve, at its difficulty.
  if (auto solved = task->solve(*tokens); !solved) return solved.err();
  row.prompt = std::move(*tokens);
  return row;
}

}  // namespace

result<prompt_dataset> parse_prompt_dataset(const std::string& text, const std::string& origin,
                                            const policy::task* task) {
  prompt_dataset d;
  d.origin = origin;
  std::istringstream in(text);
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    auto row = parse_row(line, task);
    if (row) {
      d.rows.push_back(std::move(*row));
    } else {
      d.bad_rows.push_back(origin + ":" + std::to_string(number) + ": " + row.err().message);
    }
  }
  if (d.rows.empty())
    return error{errc::invalid_config,
                 "dataset " + origin + " has no usable row" +
                     (d.bad_rows.empty() ? std::string(" (empty)") : "; first: " + d.bad_rows[0])};
  return d;
}

result<prompt_dataset> load_prompt_dataset(const store::object_store& store, const std::string& key,
                                           const policy::task* task) {
  const std::string origin = store.describe() + "/" + key;
  auto text = store.get(key);
  if (!text) return error{text.err().code, "dataset " + origin + ": " + text.err().message};
  return parse_prompt_dataset(*text, origin, task);
}

result<std::shared_ptr<const prompt_dataset>> open_task_dataset(const config& cfg,
                                                                const policy::task* task) {
  const std::string key = cfg.get_string("task.dataset");
  if (key.empty()) return std::shared_ptr<const prompt_dataset>();
  std::string url = cfg.get_string("task.dataset_store");
  if (url.empty()) url = cfg.get_string("store.url");
  auto store = store::open_store(url, cfg);
  if (!store) return error{store.err().code, "task.dataset_store: " + store.err().message};
  auto d = load_prompt_dataset(**store, key, task);
  if (!d) return d.err();
  auto log = logger("dataset");
  for (const auto& bad : d->bad_rows) log->error("dataset row left out: {}", bad);
  log->info("dataset {}: {} rows ({} left out)", d->origin, d->rows.size(), d->bad_rows.size());
  return std::shared_ptr<const prompt_dataset>(std::make_shared<prompt_dataset>(std::move(*d)));
}

}  // namespace moerl::job
