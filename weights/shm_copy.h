// The same-host path of the weight plane: a cache writes a version once into a sealed memfd
// (memfd_create, then F_SEAL_SHRINK|GROW|WRITE|SEAL: after the seals nobody, the cache
// included, can change, shrink or grow it) and readers on its host (same boot, network, mount
// and pid namespace: common/host_identity.h) open it through /proc/<cache pid>/fd/<fd>, map it
// and copy it out in one pass, instead of pulling it chunk by chunk through ZeroMQ (two copies
// and a sha256 per chunk). The cache offers the copy only of bytes it has verified (every
// chunk and the whole version against their sha256 on put), so a reader that finds the seals
// and the inode the cache named skips its own sha256 of the version (weights/PROTOCOL.md,
// "The same-host path", has the argument); a file without them (an older cache's /dev/shm
// file) is still hashed whole. A memfd has no name in any directory: it dies with the cache
// process's last descriptor, so a killed cache leaves nothing behind.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/error.h"

namespace moerl::weights {

class shm_copy {
 public:
  // Writes `bytes` to a new sealed memfd for `version` (`sharded`: shard `shard` of it; the
  // name, seen in /proc/<pid>/fd, says which). Closed by the destructor; readers that opened
  // or mapped it keep it until they close or unmap it.
  static result<std::unique_ptr<shm_copy>> publish(uint64_t version, std::string_view bytes,
                                                   bool sharded = false, uint32_t shard = 0);
  ~shm_copy();
  shm_copy(const shm_copy&) = delete;
  shm_copy& operator=(const shm_copy&) = delete;
  uint64_t version() const { return version_; }
  // /proc/<this pid>/fd/<fd>: what readers open.
  const std::string& path() const { return path_; }
  // The memfd's inode number: a reader compares it with the file it opened, so a descriptor
  // number reused for another file (the cache moved on, or a new process got the pid) is
  // never taken for this copy.
  uint64_t inode() const { return inode_; }

 private:
  shm_copy(uint64_t version, int fd) : version_(version), fd_(fd) {}
  uint64_t version_;
  int fd_;
  std::string path_;
  uint64_t inode_ = 0;
};

// What a reader sends with `meta` and the cache compares with its own: boot id and network,
// mount and pid namespaces (common/host_identity.h). The pid namespace because the reader
// opens /proc/<cache pid>/fd/<fd>, which names the cache only in the cache's pid namespace.
std::string same_host_identity();

struct same_host_bytes {
  std::string bytes;
  // The file was the sealed copy the cache named: inode `inode`, sealed against writes,
  // shrinking and growing. Its bytes are the ones the cache verified; false: hash them.
  bool sealed = false;
};

// The bytes of the file at `path`, which must hold exactly `num_bytes`. `inode`: the inode
// the cache named for its sealed copy (0: none, an older cache's file). errc::not_found when
// it is not there (another host's /proc or /dev/shm; the cache moved on or exited),
// errc::invalid_argument when it has the wrong size or is not the inode named.
result<same_host_bytes> read_shm_copy(const std::string& path, uint64_t num_bytes,
                                      uint64_t inode = 0);

}  // namespace moerl::weights
