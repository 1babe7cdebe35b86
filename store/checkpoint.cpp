#include "store/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "common/log.h"
#include "common/status_try.h"
#include "store/digest.h"
#include "store/key_rules.h"

namespace moerl::store {

namespace {

constexpr const char* format_name = "moerl-checkpoint";
constexpr const char* marker_name = "COMMITTED";
constexpr const char* manifest_name = "manifest.json";
constexpr const char* step_tag = "step-";
constexpr const char* shard_format_name = "moerl-checkpoint-shard";

std::string join(const std::string& prefix, const std::string& rest) {
  return prefix.empty() ? rest : prefix + "/" + rest;
}

std::string content_hash_of(const std::vector<manifest_entry>& parts) {
  std::string listing;
  for (const auto& p : parts)
    listing += p.name + "\n" + std::to_string(p.size) + "\n" + p.sha256 + "\n";
  return sha256_hex(listing);
}

error torn(const std::string& dir, const std::string& why) {
  return error(errc::malformed_message, "checkpoint " + dir + ": " + why);
}

nlohmann::json to_json(const checkpoint_manifest& m) {
  nlohmann::json parts = nlohmann::json::array();
  for (const auto& p : m.parts)
    parts.push_back({{"name", p.name}, {"size", p.size}, {"sha256", p.sha256}});
  return {{"format", format_name}, {"version", m.version},           {"step", m.step},
          {"parts", parts},        {"content_hash", m.content_hash}, {"meta", m.meta}};
}

result<checkpoint_manifest> parse_manifest(const std::string& dir, const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return torn(dir, "manifest.json is not a JSON object");
  if (j.value("format", "") != format_name)
    return torn(dir, "manifest.json has no format \"moerl-checkpoint\"");
  checkpoint_manifest m;
  const auto& v = j["version"];
  if (!v.is_number_integer() || v.get<int>() != checkpoint_manifest::current_version)
    return torn(dir, "manifest.json version " + v.dump() + " is not supported (want 1)");
  if (!j["step"].is_number_unsigned()) return torn(dir, "manifest.json has no unsigned \"step\"");
  m.step = j["step"].get<uint64_t>();
  if (!j["content_hash"].is_string()) return torn(dir, "manifest.json has no \"content_hash\"");
  m.content_hash = j["content_hash"].get<std::string>();
  if (!j["parts"].is_array() || j["parts"].empty())
    return torn(dir, "manifest.json has no \"parts\"");
  for (const auto& p : j["parts"]) {
    if (!p.is_object() || !p["name"].is_string() || !p["size"].is_number_unsigned() ||
        !p["sha256"].is_string())
      return torn(dir, "manifest.json has a part without name/size/sha256: " + p.dump());
    manifest_entry e{p["name"].get<std::string>(), p["size"].get<uint64_t>(),
                     p["sha256"].get<std::string>()};
    if (auto st = validate_key(e.name); !st)
      return torn(dir, "manifest.json part: " + st.err().message);
    m.parts.push_back(std::move(e));
  }
  if (j.contains("meta")) m.meta = j["meta"];
  return m;
}

// "step-000000000042" -> 42; anything else is not a checkpoint directory.
bool parse_step(const std::string& segment, uint64_t* step) {
  if (segment.rfind(step_tag, 0) != 0) return false;
  const std::string digits = segment.substr(std::string(step_tag).size());
  if (digits.empty() || digits.size() > 19) return false;
  for (char c : digits)
    if (c < '0' || c > '9') return false;
  *step = std::stoull(digits);
  return true;
}

// Validates part names (distinct, valid keys) and lists them as manifest entries named
// `name_prefix` + name, sorted by name.
result<std::vector<manifest_entry>> listed_parts(const std::string& dir,
                                                 const std::vector<checkpoint_part>& parts,
                                                 const std::string& name_prefix) {
  if (parts.empty())
    return error(errc::invalid_argument, "checkpoint " + dir + ": no parts to write");
  std::set<std::string> names;
  std::vector<manifest_entry> out;
  for (const auto& p : parts) {
    if (auto st = validate_key(p.name); !st)
      return error(errc::invalid_argument, "checkpoint " + dir + " part name: " + st.err().message);
    if (!names.insert(p.name).second)
      return error(errc::invalid_argument,
                   "checkpoint " + dir + ": part '" + p.name + "' given twice");
    out.push_back({name_prefix + p.name, p.bytes.size(), sha256_hex(p.bytes)});
  }
  std::sort(out.begin(), out.end(),
            [](const manifest_entry& a, const manifest_entry& b) { return a.name < b.name; });
  return out;
}

// The commit phase every checkpoint ends with, one writer or many: manifest, then marker.
status commit_manifest(object_store& store, const std::string& dir, const checkpoint_manifest& m) {
  if (auto st = store.put(join(dir, manifest_name), to_json(m).dump(2)); !st) return st;
  if (auto st = store.put(join(dir, marker_name), m.content_hash); !st) return st;
  logger("store")->info("checkpoint {} committed: {} parts, content {}", dir, m.parts.size(),
                        m.content_hash.substr(0, 16));
  return ok_status();
}

}  // namespace

std::string checkpoint_dir(const std::string& prefix, uint64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s%012llu", step_tag, static_cast<unsigned long long>(step));
  return join(prefix, buf);
}

result<checkpoint_manifest> write_checkpoint(object_store& store, const std::string& prefix,
                                             uint64_t step,
                                             const std::vector<checkpoint_part>& parts,
                                             const nlohmann::json& meta) {
  const std::string dir = checkpoint_dir(prefix, step);
  checkpoint_manifest m;
  m.step = step;
  m.meta = meta;
  ASSIGN_OR_RETURN(m.parts, listed_parts(dir, parts, ""));
  m.content_hash = content_hash_of(m.parts);

  // A rewrite must not leave the old marker vouching for half-new parts.
  if (auto st = store.remove(join(dir, marker_name)); !st) return st.err();
  for (const auto& p : parts) {
    if (auto st = store.put(join(dir, "parts/" + p.name), p.bytes); !st) return st.err();
  }
  if (auto st = commit_manifest(store, dir, m); !st) return st.err();
  return m;
}

std::string shard_name(uint32_t shard) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "shard-%04u", shard);
  return buf;
}

result<std::vector<manifest_entry>> write_checkpoint_shard(
    object_store& store, const std::string& prefix, uint64_t step, uint32_t shard,
    uint32_t num_shards, const std::vector<checkpoint_part>& parts, bool again) {
  const std::string dir = checkpoint_dir(prefix, step);
  if (shard >= num_shards)
    return error(errc::invalid_argument, "checkpoint " + dir + ": shard " + std::to_string(shard) +
                                             " is not below num_shards " +
                                             std::to_string(num_shards));
  ASSIGN_OR_RETURN(auto entries, listed_parts(dir, parts, shard_name(shard) + "/"));
  const std::string marker = join(dir, "shards/" + shard_name(shard) + ".json");
  if (!again) {
    if (auto st = store.remove(join(dir, marker_name)); !st) return st.err();
    // The marker goes first out of the way too: a crash mid-rewrite leaves the shard not
    // durable.
    if (auto st = store.remove(marker); !st) return st.err();
  }
  for (const auto& p : parts) {
    if (auto st = store.put(join(dir, "parts/" + shard_name(shard) + "/" + p.name), p.bytes); !st)
      return st.err();
  }
  nlohmann::json listed = nlohmann::json::array();
  for (const auto& e : entries)
    listed.push_back({{"name", e.name}, {"size", e.size}, {"sha256", e.sha256}});
  const nlohmann::json j{{"format", shard_format_name},
                         {"step", step},
                         {"shard", shard},
                         {"num_shards", num_shards},
                         {"parts", listed}};
  if (auto st = store.put(marker, j.dump()); !st) return st.err();
  return entries;
}

result<checkpoint_manifest> commit_sharded_checkpoint(object_store& store,
                                                      const std::string& prefix, uint64_t step,
                                                      uint32_t num_shards,
                                                      const nlohmann::json& meta) {
  const std::string dir = checkpoint_dir(prefix, step);
  if (num_shards == 0) return error(errc::invalid_argument, "checkpoint " + dir + ": no shards");
  checkpoint_manifest m;
  m.step = step;
  m.meta = meta.is_object() ? meta : nlohmann::json::object();
  m.meta["num_shards"] = num_shards;
  for (uint32_t k = 0; k < num_shards; ++k) {
    const std::string where = "shards/" + shard_name(k) + ".json";
    auto text = store.get(join(dir, where));
    if (!text) {
      if (text.err().code == errc::not_found)
        return error(errc::not_found, "checkpoint " + dir + ": " + shard_name(k) + " of " +
                                          std::to_string(num_shards) + " is not durable yet");
      return text.err();
    }
    auto j = nlohmann::json::parse(text.value(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || j.value("format", "") != shard_format_name)
      return torn(dir, where + " is not a shard marker");
    if (!j["step"].is_number_unsigned() || j["step"].get<uint64_t>() != step ||
        !j["shard"].is_number_unsigned() || j["shard"].get<uint64_t>() != k ||
        !j["num_shards"].is_number_unsigned() || j["num_shards"].get<uint64_t>() != num_shards)
      return torn(dir, where + " names step " + j["step"].dump() + ", shard " + j["shard"].dump() +
                           " of " + j["num_shards"].dump() + ", not step " + std::to_string(step) +
                           ", " + shard_name(k) + " of " + std::to_string(num_shards));
    if (!j["parts"].is_array() || j["parts"].empty()) return torn(dir, where + " lists no parts");
    const std::string own = shard_name(k) + "/";
    for (const auto& p : j["parts"]) {
      if (!p.is_object() || !p["name"].is_string() || !p["size"].is_number_unsigned() ||
          !p["sha256"].is_string() || p["name"].get<std::string>().rfind(own, 0) != 0)
        return torn(
            dir, where + " has a part without name/size/sha256 or outside the shard: " + p.dump());
      m.parts.push_back({p["name"].get<std::string>(), p["size"].get<uint64_t>(),
                         p["sha256"].get<std::string>()});
    }
  }
  std::sort(m.parts.begin(), m.parts.end(),
            [](const manifest_entry& a, const manifest_entry& b) { return a.name < b.name; });
  m.content_hash = content_hash_of(m.parts);
  if (auto st = commit_manifest(store, dir, m); !st) return st.err();
  return m;
}

result<std::vector<checkpoint_part>> read_checkpoint_shard(const object_store& store,
                                                           const std::string& prefix,
                                                           const checkpoint_manifest& manifest,
                                                           uint32_t shard) {
  const std::string dir = checkpoint_dir(prefix, manifest.step);
  const std::string own = shard_name(shard) + "/";
  std::vector<checkpoint_part> out;
  for (const auto& p : manifest.parts) {
    if (p.name.rfind(own, 0) != 0) continue;
    ASSIGN_OR_RETURN(auto bytes, store.get(join(dir, "parts/" + p.name)));
    if (bytes.size() != p.size || sha256_hex(bytes) != p.sha256)
      return torn(dir, "part '" + p.name + "' does not match its size and sha256 in the manifest");
    out.push_back({p.name.substr(own.size()), std::move(bytes)});
  }
  if (out.empty())
    return error(errc::not_found, "checkpoint " + dir + " has no " + shard_name(shard) +
                                      " (its manifest lists " +
                                      std::to_string(manifest.parts.size()) + " parts)");
  return out;
}

namespace {

// verify_checkpoint's work; with `keep`, the verified parts' bytes are handed back so a
// loader does not read them twice.
result<checkpoint_manifest> verify_step(const object_store& store, const std::string& prefix,
                                        uint64_t step, std::vector<checkpoint_part>* keep,
                                        bool read_parts = true) {
  const std::string dir = checkpoint_dir(prefix, step);
  auto marker = store.get(join(dir, marker_name));
  if (!marker) {
    if (marker.err().code == errc::not_found)
      return error(errc::not_found,
                   "checkpoint " + dir + " is not committed (no COMMITTED marker)");
    return marker.err();
  }
  auto text = store.get(join(dir, manifest_name));
  if (!text) {
    if (text.err().code == errc::not_found)
      return torn(dir, "COMMITTED but manifest.json is missing");
    return text.err();
  }
  ASSIGN_OR_RETURN(auto m, parse_manifest(dir, text.value()));
  if (m.step != step)
    return torn(dir, "manifest.json names step " + std::to_string(m.step) + ", not " +
                         std::to_string(step));
  if (content_hash_of(m.parts) != m.content_hash)
    return torn(dir, "manifest.json's content_hash does not match its parts listing");
  if (marker.value() != m.content_hash)
    return torn(dir, "COMMITTED marker holds '" + marker.value().substr(0, 64) +
                         "', not the manifest's content hash " + m.content_hash);
  for (const auto& p : m.parts) {
    if (!read_parts) break;
    auto bytes = store.get(join(dir, "parts/" + p.name));
    if (!bytes) {
      if (bytes.err().code == errc::not_found) return torn(dir, "part '" + p.name + "' is missing");
      return bytes.err();
    }
    if (bytes->size() != p.size)
      return torn(dir, "part '" + p.name + "' has " + std::to_string(bytes->size()) +
                           " bytes, manifest says " + std::to_string(p.size));
    if (sha256_hex(bytes.value()) != p.sha256)
      return torn(dir, "part '" + p.name + "' does not match its sha256");
    if (keep != nullptr) keep->push_back({p.name, std::move(bytes.value())});
  }
  return m;
}

// The newest step for which verify_step succeeds (see latest_committed).
result<checkpoint_manifest> newest_intact(const object_store& store, const std::string& prefix,
                                          std::vector<checkpoint_part>* keep) {
  ASSIGN_OR_RETURN(auto steps, committed_steps(store, prefix));
  auto log = logger("store");
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (keep != nullptr) keep->clear();
    auto m = verify_step(store, prefix, *it, keep);
    if (m) return m;
    // A torn checkpoint is expected after a crash; an I/O error is not, and must not make
    // an older checkpoint look like the latest.
    if (m.err().code != errc::malformed_message && m.err().code != errc::not_found) return m.err();
    log->warn("skipping checkpoint: {}", m.err().message);
  }
  if (keep != nullptr) keep->clear();
  return error(errc::not_found,
               "no committed checkpoint under '" + prefix + "' in " + store.describe());
}

}  // namespace

result<checkpoint_manifest> verify_checkpoint(const object_store& store, const std::string& prefix,
                                              uint64_t step) {
  return verify_step(store, prefix, step, nullptr);
}

result<checkpoint_manifest> verify_checkpoint_manifest(const object_store& store,
                                                       const std::string& prefix, uint64_t step) {
  return verify_step(store, prefix, step, nullptr, /*read_parts=*/false);
}

result<std::vector<uint64_t>> committed_steps(const object_store& store,
                                              const std::string& prefix) {
  ASSIGN_OR_RETURN(auto keys, store.list(join(prefix, step_tag)));
  const std::string base = prefix.empty() ? "" : prefix + "/";
  std::vector<uint64_t> steps;
  for (const auto& k : keys) {
    // k = <prefix>/step-N/COMMITTED
    const std::string rest = k.substr(base.size());
    const size_t slash = rest.find('/');
    if (slash == std::string::npos || rest.substr(slash + 1) != marker_name) continue;
    uint64_t step = 0;
    if (parse_step(rest.substr(0, slash), &step)) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

result<checkpoint_manifest> latest_committed(const object_store& store, const std::string& prefix) {
  return newest_intact(store, prefix, nullptr);
}

result<loaded_checkpoint> load_latest_committed(const object_store& store,
                                                const std::string& prefix) {
  loaded_checkpoint out;
  ASSIGN_OR_RETURN(auto m, newest_intact(store, prefix, &out.parts));
  out.manifest = std::move(m);
  return out;
}

result<std::vector<checkpoint_part>> read_checkpoint(const object_store& store,
                                                     const std::string& prefix,
                                                     const checkpoint_manifest& manifest) {
  const std::string dir = checkpoint_dir(prefix, manifest.step);
  std::vector<checkpoint_part> out;
  for (const auto& p : manifest.parts) {
    ASSIGN_OR_RETURN(auto bytes, store.get(join(dir, "parts/" + p.name)));
    if (bytes.size() != p.size || sha256_hex(bytes) != p.sha256)
      return torn(dir, "part '" + p.name + "' changed since the checkpoint was verified");
    out.push_back({p.name, std::move(bytes)});
  }
  return out;
}

status remove_checkpoint(object_store& store, const std::string& prefix, uint64_t step) {
  const std::string dir = checkpoint_dir(prefix, step);
  // Only the marker's removal must be durable: once it is, the step no longer counts, and a
  // crash that brings back some of the rest leaves garbage that no reader takes for a
  // checkpoint. Syncing each removal cost the trainer a directory fsync per object, 8 per
  // version in the default run.
  if (auto st = store.remove(join(dir, marker_name)); !st) return st;
  ASSIGN_OR_RETURN(auto keys, store.list(dir + "/"));
  return store.remove_unsynced(keys);
}

}  // namespace moerl::store
