// Durable checkpoints on any object_store: parts, then a manifest, then a COMMITTED marker.
// A checkpoint counts only when its marker exists and everything it vouches for checks
// out, so a writer that dies at any point leaves either the previous checkpoint as the
// latest or a complete new one, never a torn one.
//
// Layout under `prefix` (e.g. "runs/r1/ckpt"), for step 42:
//   <prefix>/step-000000000042/parts/<name>   the bytes of each part (names may hold '/')
//   <prefix>/step-000000000042/manifest.json  {"format": "moerl-checkpoint", "version": 1,
//       "step": 42, "parts": [{"name", "size", "sha256"}, ...] (sorted by name),
//       "content_hash": sha256 of the parts listing, "meta": caller's JSON}
//   <prefix>/step-000000000042/COMMITTED      the content hash, written last
// The content hash identifies the checkpoint's content independent of step and meta (the
// weight version the trainer announces).
//
// A sharded checkpoint (one shard per trainer group member, each written by its own member;
// job/README.md) adds a phase between parts and manifest:
//   <prefix>/step-N/parts/shard-0003/<name>   shard 3's parts (the manifest names them
//                                             "shard-0003/<name>")
//   <prefix>/step-N/shards/shard-0003.json    the shard's marker, written after its parts:
//       {"format": "moerl-checkpoint-shard", "step", "shard", "num_shards",
//        "parts": [{"name", "size", "sha256"}, ...]}
// and the committer (rank 0) writes manifest.json and COMMITTED only once every shard's
// marker exists, from the markers alone (no part is read twice). The manifest's meta then
// holds "num_shards". So a checkpoint is whole or not counted, however many writers it has.
// Functions here are safe from any thread as far as the store is; one writer per (prefix, step).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "store/object_store.h"

namespace moerl::store {

struct checkpoint_part {
  std::string name;  // a valid store key (segments, no "..")
  std::string bytes;
};

struct manifest_entry {
  std::string name;
  uint64_t size = 0;
  std::string sha256;  // hex
};

struct checkpoint_manifest {
  static constexpr int current_version = 1;
  int version = current_version;
  uint64_t step = 0;
  std::vector<manifest_entry> parts;  // sorted by name
  std::string content_hash;           // hex sha256 over "name\nsize\nsha256\n" of each part
  nlohmann::json meta = nlohmann::json::object();
};

// "<prefix>/step-<12 digits>" (zero-padded so the store's sorted listing is step order).
std::string checkpoint_dir(const std::string& prefix, uint64_t step);

// Writes the parts, the manifest, then COMMITTED. Rewriting an existing step first removes
// its marker, so a crash mid-rewrite leaves it uncommitted rather than torn. Part names
// must be valid keys and distinct; at least one part. Returns the manifest written.
result<checkpoint_manifest> write_checkpoint(object_store& store, const std::string& prefix,
                                             uint64_t step,
                                             const std::vector<checkpoint_part>& parts,
                                             const nlohmann::json& meta = nlohmann::json::object());

// Checks one step: manifest parses and names this step, its content hash is consistent,
// COMMITTED holds that hash, every part exists with the recorded size and sha256.
// errc::not_found when the step has no marker; errc::malformed_message (with the reason)
// for anything torn or corrupt.
result<checkpoint_manifest> verify_checkpoint(const object_store& store, const std::string& prefix,
                                              uint64_t step);

// The newest step that verifies; older ones are tried when newer ones are torn (each one
// skipped is logged with its reason). errc::not_found when there is none.
result<checkpoint_manifest> latest_committed(const object_store& store, const std::string& prefix);

// latest_committed and the parts it verified, read once (what a resume needs). Parts are
// in manifest order (sorted by name).
struct loaded_checkpoint {
  checkpoint_manifest manifest;
  std::vector<checkpoint_part> parts;
};
result<loaded_checkpoint> load_latest_committed(const object_store& store,
                                                const std::string& prefix);

// Reads a verified checkpoint's parts (in manifest order), re-checking each part's hash.
result<std::vector<checkpoint_part>> read_checkpoint(const object_store& store,
                                                     const std::string& prefix,
                                                     const checkpoint_manifest& manifest);

// ---- sharded checkpoints (see the layout above) ----

// "shard-0003": the directory and part-name prefix of shard 3.
std::string shard_name(uint32_t shard);

// Writes shard `shard` of `num_shards` for `step`: its parts, then its marker. Uncommits the
// step first (a rewrite must not leave COMMITTED vouching for half-new parts). Part names as
// for write_checkpoint; returns the shard's manifest entries (names carry the shard prefix).
// `again`: the same parts once more after a try whose outcome is unknown (the store timed
// out; the puts may have landed and the step been committed since): nothing is removed, the
// parts and the marker are put again with the bytes they already had or were meant to have,
// so a commit made meanwhile stays valid.
result<std::vector<manifest_entry>> write_checkpoint_shard(
    object_store& store, const std::string& prefix, uint64_t step, uint32_t shard,
    uint32_t num_shards, const std::vector<checkpoint_part>& parts, bool again = false);

// Commits `step` once every shard's marker is there: manifest (parts of every shard, meta +
// "num_shards") then COMMITTED. errc::not_found names the first shard not durable yet;
// errc::malformed_message a marker that does not parse or names another step or shape.
result<checkpoint_manifest> commit_sharded_checkpoint(object_store& store,
                                                      const std::string& prefix, uint64_t step,
                                                      uint32_t num_shards,
                                                      const nlohmann::json& meta);

// Checks a step's marker and manifest only (no part is read): what a member that will read
// just its own shard needs. Errors as verify_checkpoint's.
result<checkpoint_manifest> verify_checkpoint_manifest(const object_store& store,
                                                       const std::string& prefix, uint64_t step);

// The parts of shard `shard` of a committed checkpoint, names without the shard prefix, each
// checked against the manifest. errc::not_found when the checkpoint has no such shard.
result<std::vector<checkpoint_part>> read_checkpoint_shard(const object_store& store,
                                                           const std::string& prefix,
                                                           const checkpoint_manifest& manifest,
                                                           uint32_t shard);

// Steps that have a COMMITTED marker (not yet verified), ascending.
result<std::vector<uint64_t>> committed_steps(const object_store& store, const std::string& prefix);

// Removes a step: the marker first, durably (so it stops counting at once), then parts and
// manifest (object_store::remove_unsynced: a crash may leave some of them behind).
status remove_checkpoint(object_store& store, const std::string& prefix, uint64_t step);

}  // namespace moerl::store
