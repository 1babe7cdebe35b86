// Policy versions as files an external rollout worker maps (RolloutWorker.weights(v),
// python/WORKERS.md): the node writes each version once, from the bytes its weight feed
// verified, into shared memory (/dev/shm/<node pid>:worker-weights:v<N>, so `moerl up` removes
// what a killed node left), with the sha256 the worker checks its mapping against. Only the
// newest `keep` versions stay. Thread-safe: the node's rollout actors share one.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace moerl::workers {

class version_files {
 public:
  explicit version_files(size_t keep = 3);
  ~version_files();  // removes every file it wrote
  version_files(const version_files&) = delete;
  version_files& operator=(const version_files&) = delete;

  // {path, bytes, sha256} of version v's file, written now unless it is there already
  // (`rewrite`: the worker found the file's bytes wrong, so it is written again).
  result<nlohmann::json> file_of(uint64_t version, const std::string& bytes, bool rewrite);

 private:
  struct held {
    std::string path, sha256;
    uint64_t bytes = 0;
  };
  std::mutex mu_;
  std::string prefix_;
  size_t keep_;
  std::map<uint64_t, held> files_;
};

}  // namespace moerl::workers
