#include "job/checkpointed_curve.h"

#include <algorithm>
#include <cstdio>

#include "store/digest.h"

namespace moerl::job {

using nlohmann::json;

checkpointed_curve::checkpointed_curve(std::string key_prefix, std::string name)
    : key_prefix_(std::move(key_prefix)), name_(std::move(name)), folder_(name_) {
  std::replace(folder_.begin(), folder_.end(), '_', '-');
}

json checkpointed_curve::meta(const std::vector<json>& curve, std::vector<named_object>* to_write) {
  if (curve.size() < covered_) {  // a caller that rewound its curve: start the segments again
    segments_ = json::array();
    covered_ = 0;
  }
  while (curve.size() - covered_ >= kCurveSegmentEntries) {
    const json entries = std::vector<json>(
        curve.begin() + static_cast<std::ptrdiff_t>(covered_),
        curve.begin() + static_cast<std::ptrdiff_t>(covered_ + kCurveSegmentEntries));
    std::string bytes = entries.dump();
    std::string sha = store::sha256_hex(bytes);
    // Named by position and content: a segment is never overwritten with other entries (a run
    // resumed from an older checkpoint writes its own segments beside the abandoned ones).
    char first[24];
    std::snprintf(first, sizeof first, "%012zu", covered_);
    std::string key = key_prefix_ + "/" + folder_ + "/" + first + "-" + sha.substr(0, 16) + ".json";
    segments_.push_back({{"key", key}, {"sha256", sha}, {"entries", kCurveSegmentEntries}});
    if (to_write) to_write->push_back({std::move(key), std::move(bytes)});
    covered_ += kCurveSegmentEntries;
  }
  return {{name_ + "_segments", segments_},
          {name_ + "_tail",
           std::vector<json>(curve.begin() + static_cast<std::ptrdiff_t>(covered_), curve.end())}};
}

std::vector<json> checkpointed_curve::restore(const store::object_store& store, const json& meta,
                                              std::vector<std::string>* warnings) {
  segments_ = json::array();
  covered_ = 0;
  std::vector<json> curve;
  if (meta.contains(name_) && meta[name_].is_array()) {
    for (const auto& e : meta[name_]) curve.push_back(e);
    return curve;  // the segments are cut from it at the next checkpoint
  }
  const json segments = meta.value(name_ + "_segments", json::array());
  bool whole = segments.is_array();
  for (const auto& s : segments.is_array() ? segments : json::array()) {
    const std::string key = s.is_object() ? s.value("key", "") : "";
    auto bytes = store.get(key);
    std::string why;
    json entries;
    if (!bytes) {
      why = bytes.err().to_string();
    } else if (store::sha256_hex(*bytes) != s.value("sha256", "")) {
      why = "its bytes do not match the manifest's sha256";
    } else {
      entries = json::parse(*bytes, nullptr, false);
      if (!entries.is_array()) why = "not a JSON array";
    }
    if (!why.empty()) {
      if (warnings) warnings->push_back(folder_ + " segment " + key + " left out: " + why);
      whole = false;
      continue;
    }
    for (auto& e : entries) curve.push_back(std::move(e));
    if (whole) {
      segments_.push_back(s);
      covered_ = curve.size();
    }
  }
  if (!whole) {  // the segments no longer match the curve's positions: cut them afresh
    segments_ = json::array();
    covered_ = 0;
  }
  for (const auto& e : meta.value(name_ + "_tail", json::array())) curve.push_back(e);
  return curve;
}

}  // namespace moerl::job
