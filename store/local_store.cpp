#include "store/local_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <random>

#include "common/posix_check.h"
#include "store/key_rules.h"

namespace moerl::store {

namespace fs = std::filesystem;

namespace {

// Closes a descriptor on every path out of a function; close errors after a successful
// fsync cannot lose data, so they are not reported.
struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

status write_all(int fd, const std::string& bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n;
    POSIX_CHECK_EXCEPT(n = ::write(fd, bytes.data() + done, bytes.size() - done), EINTR,
                       "writing " + path);
    if (n > 0) done += static_cast<size_t>(n);
  }
  return ok_status();
}

// mkdir -p of a key's directories under the root; EEXIST from a concurrent creator is fine.
// False with the failing mkdir's errno: ENOENT when a concurrent remove() took a directory
// above the one being made away in between.
bool make_key_dirs(const std::string& root, const std::string& key) {
  for (size_t pos = key.find('/'); pos != std::string::npos; pos = key.find('/', pos + 1)) {
    const std::string dir = root + "/" + key.substr(0, pos);
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  return true;
}

// open(2) of a file in a key's directory, creating the directories only when they are
// missing (a store's writes mostly go to directories that exist: one open instead of a mkdir
// per path segment, which the coordinator's journal paid on every append). A directory
// removed by a concurrent remove() while they are made, or between mkdir and open, is made
// again (a few tries; a missing parent failed a put outright before, 1 in ~60 runs of
// local_store_test's churn case under load). Another failure returns -1 with the errno of
// the mkdir or open, which the caller reports as the open's.
int open_in_key_dir(const std::string& root, const std::string& key, const std::string& path,
                    int flags, mode_t mode) {
  int fd = ::open(path.c_str(), flags, mode);
  for (int tries = 0; fd == -1 && errno == ENOENT && tries < 8; ++tries) {
    if (!make_key_dirs(root, key)) continue;  // ENOENT tries again; anything else ends the loop
    fd = ::open(path.c_str(), flags, mode);
  }
  return fd;
}

// After an object's file is gone: removes its directories that became empty, deepest
// first, up to the root (an object store has no empty prefixes, and a run that removes
// every version's checkpoint would otherwise leave a directory per version behind).
// Stops at the first directory that is not empty or cannot be removed.
void remove_empty_dirs(const std::string& root, std::string path) {
  for (size_t slash = path.rfind('/'); slash != std::string::npos && slash > root.size();
       slash = path.rfind('/')) {
    path.resize(slash);
    if (::rmdir(path.c_str()) != 0) return;
  }
}

status fsync_dir(const std::string& dir) {
  fd_guard d;
  POSIX_CHECK(d.fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC),
              "opening directory " + dir);
  POSIX_CHECK(::fsync(d.fd), "fsync of directory " + dir);
  return ok_status();
}

// A name no other writer (thread or process) picks at the same time.
std::string temp_name() {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::string(reserved_segment_prefix) + "tmp-" + std::to_string(::getpid()) + "-" +
         std::to_string(counter++) + "-" + std::to_string(rng() % 1000000007ull);
}

}  // namespace

result<std::unique_ptr<local_store>> local_store::open(const std::string& root, bool durable) {
  if (root.empty()) return error(errc::invalid_argument, "local store: empty directory path");
  std::error_code ec;
  fs::path abs = fs::absolute(root, ec);
  if (ec)
    return error(errc::io_error, "local store: cannot resolve '" + root + "': " + ec.message());
  abs = abs.lexically_normal();
  std::string text = abs.string();
  while (text.size() > 1 && text.back() == '/') text.pop_back();
  fs::create_directories(text, ec);
  if (ec)
    return error(errc::io_error,
                 "local store: cannot create directory " + text + ": " + ec.message());
  if (!fs::is_directory(text, ec))
    return error(errc::io_error, "local store: " + text + " exists and is not a directory");
  return std::unique_ptr<local_store>(new local_store(text, durable));
}

status local_store::put(const std::string& key, const std::string& bytes) {
  return put_file(key, bytes, durable_);
}

status local_store::put_unsynced(const std::string& key, const std::string& bytes) {
  return put_file(key, bytes, false);
}

status local_store::put_file(const std::string& key, const std::string& bytes, bool sync) {
  if (auto st = validate_key(key); !st) return st;
  const std::string target = path_of(key);
  const size_t slash = target.rfind('/');
  const std::string dir = target.substr(0, slash);
  const std::string temp = dir + "/" + temp_name();

  fd_guard f;
  int open_errno = 0;
  status st = [&]() -> status {
    f.fd = open_in_key_dir(root_, key, temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    open_errno = f.fd == -1 ? errno : 0;
    POSIX_CHECK(f.fd, "creating " + temp);
    return ok_status();
  }();
  // ENOTDIR only: ENOENT after open_in_key_dir's tries means the directories kept vanishing
  // under concurrent removals, which the open's own error says.
  if (!st && open_errno == ENOTDIR)
    return error(errc::io_error, "cannot put '" + key + "' in " + describe() +
                                     ": a leading part of the key is an existing object (a "
                                     "directory cannot hold both 'a' and 'a/b')");
  if (!st) return st;
  st = write_all(f.fd, bytes, temp);
  if (st && sync) {
    st = [&]() -> status {
      POSIX_CHECK(::fsync(f.fd), "fsync of " + temp);
      return ok_status();
    }();
  }
  if (st) {
    st = [&]() -> status {
      POSIX_CHECK(::rename(temp.c_str(), target.c_str()), "renaming " + temp + " to " + target);
      return ok_status();
    }();
  }
  if (!st) {
    ::unlink(temp.c_str());  // best effort: the failure being reported matters more
    return st;
  }
  // The rename is durable only once the directory entry is on disk.
  if (sync) return fsync_dir(dir);
  return ok_status();
}

status local_store::append(const std::string& key, const std::string& bytes) {
  if (auto st = validate_key(key); !st) return st;
  const std::string path = path_of(key);
  fd_guard f;
  // O_EXCL first, to know whether this call created the file (its entry then needs syncing).
  f.fd =
      open_in_key_dir(root_, key, path, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  const bool created = f.fd >= 0;
  if (f.fd == -1 && errno == EEXIST) {
    POSIX_CHECK(f.fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC), "opening " + path);
  } else {
    POSIX_CHECK(f.fd, "creating " + path);
  }
  struct stat sb {};
  POSIX_CHECK(::fstat(f.fd, &sb), "stat of " + path);
  status st = write_all(f.fd, bytes, path);
  if (st && durable_) {
    st = [&]() -> status {
      POSIX_CHECK(::fdatasync(f.fd), "fdatasync of " + path);
      return ok_status();
    }();
  }
  if (!st) {
    // Best effort: the failure being reported matters more than one in cutting back.
    if (::ftruncate(f.fd, sb.st_size) != 0) {}
    return st;
  }
  // A new file's directory entry is durable only once the directory is on disk.
  if (created && durable_) return fsync_dir(path.substr(0, path.rfind('/')));
  return ok_status();
}

result<std::string> local_store::get(const std::string& key) const {
  if (auto st = validate_key(key); !st) return st.err();
  const std::string path = path_of(key);
  fd_guard f;
  // ENOENT and ENOTDIR come back as errc::not_found.
  POSIX_CHECK(f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC),
              "object '" + key + "' in " + describe());
  struct stat sb {};
  POSIX_CHECK(::fstat(f.fd, &sb), "stat of " + path);
  if (S_ISDIR(sb.st_mode))
    return error(errc::not_found,
                 "no object '" + key + "' in " + describe() + " (it is a prefix of other keys)");
  std::string out;
  out.reserve(static_cast<size_t>(sb.st_size));
  char buf[1 << 16];
  for (;;) {
    ssize_t n;
    POSIX_CHECK_EXCEPT(n = ::read(f.fd, buf, sizeof buf), EINTR, "reading " + path);
    if (n == -1) continue;  // interrupted
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

result<std::vector<std::string>> local_store::list(const std::string& prefix) const {
  if (auto st = validate_prefix(prefix); !st) return st.err();
  // Walk only the directory the prefix pins down; the rest of the tree cannot match.
  const size_t slash = prefix.rfind('/');
  const std::string start =
      slash == std::string::npos ? root_ : root_ + "/" + prefix.substr(0, slash);
  std::vector<std::string> keys;
  // A walk of our own rather than recursive_directory_iterator: remove() takes away
  // directories that became empty, so a directory met in the walk may be gone by the time
  // it is opened; that one held no objects any more and is skipped, not an error.
  std::vector<std::string> dirs{start};
  while (!dirs.empty()) {
    const std::string dir = std::move(dirs.back());
    dirs.pop_back();
    std::error_code ec;
    fs::directory_iterator it(dir, ec), end;
    if (ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory) continue;
    if (ec) return error(errc::io_error, "listing " + dir + ": " + ec.message());
    for (; it != end; it.increment(ec)) {
      if (ec) return error(errc::io_error, "listing " + dir + ": " + ec.message());
      const std::string name = it->path().filename().string();
      // A put in progress (or one that crashed): not an object.
      if (name.rfind(reserved_segment_prefix, 0) == 0) continue;
      std::error_code type_ec;  // an entry removed meanwhile is neither type: skipped
      if (it->is_directory(type_ec)) {
        dirs.push_back(it->path().string());
        continue;
      }
      if (!it->is_regular_file(type_ec)) continue;
      std::string key = it->path().string().substr(root_.size() + 1);
      if (key.compare(0, prefix.size(), prefix) == 0) keys.push_back(std::move(key));
    }
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

// Unlinks one object's file; a missing one or a directory (not an object) is no error.
status local_store::unlink_object(const std::string& key) const {
  if (auto st = validate_key(key); !st) return st;
  const std::string path = path_of(key);
  struct stat sb {};
  if (::lstat(path.c_str(), &sb) == 0 && S_ISDIR(sb.st_mode)) return ok_status();  // not an object
  status st = [&]() -> status {
    POSIX_CHECK(::unlink(path.c_str()), "removing " + path);
    return ok_status();
  }();
  if (!st && st.err().code != errc::not_found) return st;
  if (st) remove_empty_dirs(root_, path);
  return ok_status();
}

status local_store::remove_unsynced(const std::vector<std::string>& keys) {
  status first;
  for (const auto& k : keys)
    if (auto st = unlink_object(k); !st && first) first = st;
  return first;
}

status local_store::remove(const std::string& key) {
  if (auto st = unlink_object(key); !st) return st;
  const std::string path = path_of(key);
  if (durable_) {
    const std::string dir = path.substr(0, path.rfind('/'));
    if (auto synced = fsync_dir(dir); !synced && synced.err().code != errc::not_found)
      return synced;
  }
  return ok_status();
}

}  // namespace moerl::store
