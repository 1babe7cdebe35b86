#include "bench/store/store_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>

#include "bench/support.h"
#include "common/percentile.h"
#include "provenance/provenance.h"
#include "store/checkpoint.h"
#include "store/object_store.h"
#include "store/store_info.h"

namespace moerl::bench {

namespace {

nlohmann::json summarize(const std::string& op, int64_t bytes, std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  double sum = 0;
  for (double v : ms) sum += v;
  const double mean = ms.empty() ? 0 : sum / static_cast<double>(ms.size());
  double var = 0;
  for (double v : ms) var += (v - mean) * (v - mean);
  const double stddev = ms.size() > 1 ? std::sqrt(var / static_cast<double>(ms.size() - 1)) : 0;
  nlohmann::json j = {{"op", op},
                      {"bytes", bytes},
                      {"samples", ms.size()},
                      {"p50_ms", nearest_rank_percentile(ms, 50)},
                      {"p99_ms", nearest_rank_percentile(ms, 99)},
                      {"mean_ms", mean},
                      {"stddev_ms", stddev},
                      {"min_ms", ms.empty() ? 0 : ms.front()},
                      {"max_ms", ms.empty() ? 0 : ms.back()}};
  if (bytes > 0 && mean > 0) j["mb_per_s"] = static_cast<double>(bytes) / 1e6 / (mean / 1e3);
  return j;
}

}  // namespace

nlohmann::json run_store_bench(const store_bench_options& opt, const config& cfg) {
  std::string url = opt.url;
  const key_spec* url_key = find_key("store.url");
  if (url.empty() && url_key != nullptr && cfg.get_string("store.url") != url_key->default_value)
    url = cfg.get_string("store.url");  // a store chosen in the config is the one to measure
  std::filesystem::path scratch;
  if (url.empty()) {
    scratch = std::filesystem::temp_directory_path() /
              ("moerl-store-bench-" + std::to_string(std::random_device{}()));
    url = scratch.string();
  }
  auto opened = need(store::open_store(url, cfg), "opening '" + url + "'");
  auto& s = *opened;
  const std::string prefix = "bench/run-" + std::to_string(std::random_device{}());

  nlohmann::json results = nlohmann::json::array();
  for (int64_t size : opt.sizes) {
    const std::string base = prefix + "/size-" + std::to_string(size) + "/";
    for (int w = 0; w < opt.warmup; ++w) {
      need(s.put(base + "warmup", random_payload(size, 999)), "warmup put");
      if (!s.get(base + "warmup")) throw std::runtime_error("warmup get failed");
      need(s.remove(base + "warmup"), "warmup remove");
    }
    std::vector<double> put_ms, get_ms, remove_ms;
    for (int i = 0; i < opt.reps; ++i) {
      const std::string bytes = random_payload(size, static_cast<uint64_t>(i));
      const auto t0 = bench_clock::now();
      need(s.put(base + std::to_string(i), bytes), "put " + base + std::to_string(i));
      put_ms.push_back(ms_since(t0));
    }
    for (int i = 0; i < opt.reps; ++i) {
      const auto t0 = bench_clock::now();
      auto r = s.get(base + std::to_string(i));
      get_ms.push_back(ms_since(t0));
      if (!r || static_cast<int64_t>(r->size()) != size)
        throw std::runtime_error("get " + base + std::to_string(i) + " failed or was short");
    }
    const auto t0 = bench_clock::now();
    auto listed = s.list(base);
    const double list_ms = ms_since(t0);
    if (!listed || static_cast<int>(listed->size()) != opt.reps)
      throw std::runtime_error("list " + base + " did not return the " + std::to_string(opt.reps) +
                               " objects");
    for (int i = 0; i < opt.reps; ++i) {
      const auto r0 = bench_clock::now();
      need(s.remove(base + std::to_string(i)), "remove");
      remove_ms.push_back(ms_since(r0));
    }
    results.push_back(summarize("put", size, put_ms));
    results.push_back(summarize("get", size, get_ms));
    results.push_back(summarize("remove", 0, remove_ms));
    results.push_back({{"op", "list"}, {"bytes", size}, {"keys", opt.reps}, {"ms", list_ms}});
  }

  if (opt.checkpoint_bytes > 0) {
    const std::string ckpt_prefix = prefix + "/checkpoint";
    const int64_t per_part = opt.checkpoint_bytes / opt.checkpoint_parts;
    std::vector<store::checkpoint_part> parts;
    for (int p = 0; p < opt.checkpoint_parts; ++p)
      parts.push_back({"experts/" + std::to_string(p) + ".bin",
                       random_payload(per_part, 1000 + static_cast<uint64_t>(p))});
    std::vector<double> write_ms, find_ms, read_ms;
    for (int rep = 0; rep < opt.checkpoint_reps; ++rep) {
      auto t0 = bench_clock::now();
      auto m = store::write_checkpoint(s, ckpt_prefix, static_cast<uint64_t>(rep), parts);
      write_ms.push_back(ms_since(t0));
      need(std::move(m), "write_checkpoint");
      t0 = bench_clock::now();
      auto latest = store::latest_committed(s, ckpt_prefix);
      find_ms.push_back(ms_since(t0));
      if (!latest || latest->step != static_cast<uint64_t>(rep))
        throw std::runtime_error("latest_committed did not find the checkpoint just written");
      t0 = bench_clock::now();
      auto back = store::read_checkpoint(s, ckpt_prefix, latest.value());
      read_ms.push_back(ms_since(t0));
      need(std::move(back), "read_checkpoint");
    }
    const int64_t total = per_part * opt.checkpoint_parts;
    results.push_back(summarize("checkpoint_write", total, write_ms));
    results.push_back(summarize("checkpoint_find_latest", total, find_ms));
    results.push_back(summarize("checkpoint_read", total, read_ms));
    for (int rep = 0; rep < opt.checkpoint_reps; ++rep)
      need(store::remove_checkpoint(s, ckpt_prefix, static_cast<uint64_t>(rep)),
           "remove_checkpoint");
  }

  nlohmann::json config_used = nlohmann::json::object();
  for (const auto& [k, v] : cfg.values())
    if (k.rfind("store.", 0) == 0) config_used[k] = v;
  nlohmann::json report = {
      {"benchmark", "store"},
      {"durable_plane", store::durable_plane_info(s)},
      {"options",
       {{"url", scratch.empty() ? url : "(temporary directory)"},
        {"sizes", opt.sizes},
        {"reps", opt.reps},
        {"warmup", opt.warmup},
        {"checkpoint_bytes", opt.checkpoint_bytes},
        {"checkpoint_parts", opt.checkpoint_parts},
        {"checkpoint_reps", opt.checkpoint_reps}}},
      {"config", config_used},
      {"results", results},
      {"provenance", collect_provenance()},
  };
  if (!scratch.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(scratch, ec);
  }
  return report;
}

}  // namespace moerl::bench
