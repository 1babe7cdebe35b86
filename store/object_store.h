// The durable plane: a flat key -> bytes store. Backends: a local directory (default)
// and S3 (SigV4 through libcurl). Keys are '/'-separated relative paths without "..".
// Thread-safety: one object_store may be used from several threads at once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/error.h"

namespace moerl::store {

class object_store {
 public:
  virtual ~object_store() = default;
  // Writes the whole object; readers never observe a partial object (atomic replace).
  virtual status put(const std::string& key, const std::string& bytes) = 0;
  // put without making the object durable: readers still never observe a partial object,
  // but after a crash (power cut) it may be missing, empty or the old one. For copies that a
  // reader checks against a hash it has from elsewhere and that a restarted writer rewrites
  // (a policy version's store copy, job/grpo_job.cpp). The default is put.
  virtual status put_unsynced(const std::string& key, const std::string& bytes) {
    return put(key, bytes);
  }
  // errc::not_found when the key does not exist.
  virtual result<std::string> get(const std::string& key) const = 0;
  // Keys starting with `prefix`, sorted.
  virtual result<std::vector<std::string>> list(const std::string& prefix) const = 0;
  // Removing a missing key is not an error.
  virtual status remove(const std::string& key) = 0;
  // Removes objects whose removal need not survive a crash (the caller skips leftovers, as
  // the ledger skips compacted segments by sequence number): a backend may leave the removal
  // unsynced. The first error, after trying every key. The default removes one by one.
  virtual status remove_unsynced(const std::vector<std::string>& keys) {
    status first;
    for (const auto& k : keys)
      if (auto st = remove(k); !st && first) first = st;
    return first;
  }
  // Whether append() works here. S3 objects are immutable (no append), a local file is not.
  virtual bool supports_append() const { return false; }
  // Appends `bytes` to the object (created when missing) and makes them durable before it
  // returns. Unlike put, a reader may see a partial append, and a crash or an error may leave
  // any prefix of `bytes` behind: a caller frames what it appends and checks the frames when
  // it reads (the ledger's journal does). Backends without appends return errc::io_error;
  // ask supports_append() first. Why it exists: a journal that creates one object per group
  // commit made the file system's inode allocation the coordinator's main cost late in a run.
  virtual status append(const std::string& key, const std::string& /*bytes*/) {
    return error(errc::io_error, "cannot append to '" + key + "' in " + describe() +
                                     ": this store has no appends (write whole objects)");
  }
  // "file:///abs/dir" or "s3://bucket/prefix", for reports.
  virtual std::string describe() const = 0;
};

// Opens the store named by `url`: a plain path or file:// URL for a local directory
// (created if missing), or s3://bucket[/prefix] (endpoint, region and credentials from
// config keys store.* and the standard AWS_* environment variables).
result<std::unique_ptr<object_store>> open_store(const std::string& url, const config& cfg);

}  // namespace moerl::store
