// The same-host path of the weight plane: a cache writes a version once into a file under
// /dev/shm and readers on its host (same boot, network and mount namespace:
// common/host_identity.h) map it and copy it out in one pass, instead of pulling it chunk by
// chunk through ZeroMQ (two copies and a sha256 per chunk). The reader still checks the
// whole version's sha256 against the cache's content hash before it hands it out, so a torn
// or stale file is never used; on any failure it reads the chunks as before.
// The file is named /dev/shm/<cache pid>:weights:v<N> (shard k of a sharded version:
// ...:v<N>s<k>) so that a cache killed before it could
// remove it is cleaned up by its parent like libfabric's regions (common/shm_leftovers.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/error.h"

namespace moerl::weights {

class shm_copy {
 public:
  // Writes `bytes` to a new file for `version` (`shard` > 0 or sharded: that shard of it;
  // read-only for others). Removed again by the destructor; readers that opened it keep their
  // mapping.
  static result<std::unique_ptr<shm_copy>> publish(uint64_t version, std::string_view bytes,
                                                   bool sharded = false, uint32_t shard = 0);
  ~shm_copy();
  shm_copy(const shm_copy&) = delete;
  shm_copy& operator=(const shm_copy&) = delete;
  uint64_t version() const { return version_; }
  const std::string& path() const { return path_; }

 private:
  shm_copy(uint64_t version, std::string path) : version_(version), path_(std::move(path)) {}
  uint64_t version_;
  std::string path_;
};

// The bytes of the file at `path`, which must hold exactly `num_bytes`. errc::not_found when
// it is not there (another host's /dev/shm), errc::invalid_argument on a size mismatch.
result<std::string> read_shm_copy(const std::string& path, uint64_t num_bytes);

}  // namespace moerl::weights
