#include "workers/version_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "store/digest.h"

namespace moerl::workers {

version_files::version_files(size_t keep) : keep_(keep < 1 ? 1 : keep) {
  const std::string dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  prefix_ = dir + "/" + std::to_string(::getpid()) + ":worker-weights:v";
}

version_files::~version_files() {
  for (const auto& [v, f] : files_) ::unlink(f.path.c_str());
}

result<nlohmann::json> version_files::file_of(uint64_t version, const std::string& bytes,
                                              bool rewrite) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = files_.find(version);
  if (it == files_.end() || rewrite) {
    held h;
    h.path = prefix_ + std::to_string(version);
    h.bytes = bytes.size();
    h.sha256 = store::sha256_hex(bytes);
    // Written beside and renamed into place: a worker mapping the old file keeps its copy.
    const std::string tmp = h.path + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return error(errc::io_error, "cannot create " + tmp + ": " + std::strerror(errno));
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::close(fd);
    if (done != bytes.size() || ::rename(tmp.c_str(), h.path.c_str()) != 0) {
      ::unlink(tmp.c_str());
      return error(errc::io_error, "cannot write " + h.path + ": " + std::strerror(errno));
    }
    it = files_.insert_or_assign(version, std::move(h)).first;
    while (files_.size() > keep_) {
      ::unlink(files_.begin()->second.path.c_str());
      files_.erase(files_.begin());
    }
    it = files_.find(version);
    if (it == files_.end())  // older than every version kept
      return error(errc::not_found, "version " + std::to_string(version) + " is older than the " +
                                        std::to_string(keep_) + " newest this node keeps");
  }
  return nlohmann::json{
      {"path", it->second.path}, {"bytes", it->second.bytes}, {"sha256", it->second.sha256}};
}

}  // namespace moerl::workers
