// The local-directory backend: one file per key under a root directory.
//
// put writes a temporary file beside the target (".moerl-tmp-*", a reserved segment name),
// fsyncs it, renames it over the target and fsyncs the directory, so a reader sees the old
// object or the new one, never a mix, and a committed put survives a power cut.
// Limitation of a file system, not of the store contract: a key cannot be both an object
// and a prefix of another key ("a" and "a/b"); such a put fails with io_error.
// Safe to use from several threads and processes at once (each operation is a few system
// calls; concurrent puts of one key end with one of them intact).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "store/object_store.h"

namespace moerl::store {

class local_store final : public object_store {
 public:
  // Creates `root` (with parents) when missing. `durable`: fsync files and directories on
  // put (store.local_fsync); off only for scratch data.
  static result<std::unique_ptr<local_store>> open(const std::string& root, bool durable);

  status put(const std::string& key, const std::string& bytes) override;
  status put_unsynced(const std::string& key, const std::string& bytes) override;
  result<std::string> get(const std::string& key) const override;
  result<std::vector<std::string>> list(const std::string& prefix) const override;
  status remove(const std::string& key) override;
  // Unlinks without the directory fsync remove() does per key (a compaction removes
  // hundreds of journal segments at once; one fsync each stalled the coordinator for 1-3 s).
  status remove_unsynced(const std::vector<std::string>& keys) override;
  bool supports_append() const override { return true; }
  // O_APPEND write, then fdatasync (and, when it created the file, an fsync of its
  // directory). On a failed write the file is cut back to its length before the call when
  // the file system lets us, so a retry does not land after torn bytes.
  status append(const std::string& key, const std::string& bytes) override;
  std::string describe() const override { return "file://" + root_; }

  const std::string& root() const { return root_; }

 private:
  local_store(std::string root, bool durable) : root_(std::move(root)), durable_(durable) {}
  std::string path_of(const std::string& key) const { return root_ + "/" + key; }
  status unlink_object(const std::string& key) const;
  // A temporary file renamed over the target; `sync`: the file and its directory fsync'd.
  status put_file(const std::string& key, const std::string& bytes, bool sync);

  std::string root_;  // absolute, without a trailing '/'
  bool durable_;
};

}  // namespace moerl::store
