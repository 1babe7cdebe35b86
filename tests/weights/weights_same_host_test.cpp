// The same-host path (weights/shm_copy.h): a cache offers a reader on its host a sealed
// memfd of the version, which the reader reads without hashing it again; a copy without the
// seals (an older cache's /dev/shm file, an unsealed memfd) is still hashed whole and never
// used when it does not match; a copy of the wrong size or another inode is refused with an
// error naming why; the copy goes with the process that made it, killed or not.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <thread>

#include "store/digest.h"
#include "tests/support/served_cache.h"
#include "weights/cache_client.h"
#include "weights/shm_copy.h"
#include "weights/version_reader.h"
#include "weights/wire.h"
#include "zmq/parts.h"

namespace moerl::weights {
namespace {

using nlohmann::json;

constexpr uint64_t kChunk = 64 * 1024;

using testing::random_bytes;
using testing::served_cache;
using testing::zmq_ctx;

// The store's copy, for readers whose same-host copy is refused (the fake cache below serves
// no chunks, so that refusal shows as a store fallback).
std::function<result<std::string>()> store_copy(const std::string& bytes) {
  return [bytes]() -> result<std::string> { return bytes; };
}

// A cache that answers `meta` like an older (or broken) one would, offering `offer` as its
// same-host copy, and refuses every `get`: what the reader does then depends on the copy alone.
class fake_cache {
 public:
  fake_cache(void* zmq_ctx_handle, const std::string& bytes, json offer)
      : router_(zmq_socket(zmq_ctx_handle, ZMQ_ROUTER)) {
    int linger = 0;
    zmq_setsockopt(router_, ZMQ_LINGER, &linger, sizeof linger);
    EXPECT_EQ(zmq_bind(router_, "tcp://127.0.0.1:*"), 0);
    char ep[256];
    size_t len = sizeof ep;
    zmq_getsockopt(router_, ZMQ_LAST_ENDPOINT, ep, &len);
    endpoint_ = ep;
    json meta{{"bytes", bytes.size()},
              {"content_hash", store::sha256_hex(bytes)},
              {"chunk_bytes", kChunk},
              {"num_chunks", (bytes.size() + kChunk - 1) / kChunk},
              {"load", 0}};
    meta.update(offer);
    thread_ = std::thread([this, meta] { serve(meta); });
  }
  ~fake_cache() {
    stop_ = true;
    thread_.join();
    zmq_close(router_);
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  void serve(const json& meta) {
    while (!stop_) {
      zmq_pollitem_t item{router_, 0, ZMQ_POLLIN, 0};
      if (zmq_poll(&item, 1, 10) <= 0) continue;
      auto parts = zmq::recv_message_parts(router_, "fake cache");
      ASSERT_TRUE(parts && parts->size() >= 3);
      const uint64_t rid = json::parse((*parts)[2]).value("rid", uint64_t{0});
      const bool is_meta = (*parts)[1] == wire::kMeta;
      json out = is_meta ? meta : wire::error_header(rid, error(errc::not_found, "no chunks here"));
      out["rid"] = rid;
      const std::string word = is_meta ? wire::kOk : wire::kError, text = out.dump();
      zmq_send(router_, (*parts)[0].data(), (*parts)[0].size(), ZMQ_SNDMORE);
      zmq_send(router_, word.data(), word.size(), ZMQ_SNDMORE);
      zmq_send(router_, text.data(), text.size(), 0);
    }
  }
  void* router_;
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::string proc_fd_path(int fd) {
  return "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fd);
}

uint64_t inode_of(int fd) {
  struct stat st {};
  EXPECT_EQ(::fstat(fd, &st), 0);
  return st.st_ino;
}

// A memfd holding `bytes`, sealing allowed but not sealed.
int unsealed_memfd(const std::string& bytes) {
  const int fd = ::memfd_create("test-unsealed", MFD_ALLOW_SEALING | MFD_CLOEXEC);
  EXPECT_GE(fd, 0) << std::strerror(errno);
  EXPECT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  return fd;
}

TEST(same_host_shm, AReaderOnTheCachesHostReadsASealedCopyWithoutHashingIt) {
  auto ctx = zmq_ctx();
  served_cache cache(ctx, kChunk, ~0ull, /*same_host_shm=*/true);
  const std::string bytes = random_bytes(5 * kChunk + 17, 11);
  auto pusher = cache_client::connect(ctx, cache.endpoint(), 2000);
  ASSERT_TRUE(pusher);
  ASSERT_TRUE(push_version(**pusher, 4, bytes, store::sha256_hex(bytes), kChunk));

  version_reader reader(ctx, 2000, /*same_host_shm=*/true);
  auto got = reader.fetch(4, {cache.endpoint()}, nullptr);
  ASSERT_TRUE(got) << got.err().to_string();
  EXPECT_EQ(*got->bytes, bytes);
  EXPECT_EQ(got->transport, "shm");
  EXPECT_EQ(reader.counters().bytes_via_shm, bytes.size());
  EXPECT_EQ(reader.counters().bytes_via_sealed_shm, bytes.size());
  EXPECT_EQ(reader.counters().bytes_from_cache, bytes.size());

  // What the cache offered: /proc/<its pid>/fd/<fd>, its inode, sealed for good; not even a
  // writable descriptor of it can change a byte or its size.
  auto client = cache_client::connect(ctx, cache.endpoint(), 2000);
  ASSERT_TRUE(client);
  auto meta = (*client)->call(wire::kMeta, json{{"version", 4}, {"host", same_host_identity()}});
  ASSERT_TRUE(meta) << meta.err().to_string();
  const std::string path = meta->header.value("shm_path", std::string());
  EXPECT_EQ(path.rfind("/proc/" + std::to_string(::getpid()) + "/fd/", 0), 0u) << path;
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  EXPECT_EQ(inode_of(fd), meta->header.value("shm_inode", uint64_t{0}));
  constexpr int kSealed = F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
  EXPECT_EQ(::fcntl(fd, F_GET_SEALS) & kSealed, kSealed);
  EXPECT_EQ(::pwrite(fd, "x", 1, 0), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(::ftruncate(fd, 1), -1);
  EXPECT_EQ(::fcntl(fd, F_ADD_SEALS, 0), -1);  // F_SEAL_SEAL: no seal can be removed or added
  EXPECT_EQ(::mmap(nullptr, bytes.size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), MAP_FAILED);
  ::close(fd);

  // A reader that does not ask (another host, or the path off) gets chunks as before.
  version_reader remote(ctx, 2000);
  auto chunks = remote.fetch(4, {cache.endpoint()}, nullptr);
  ASSERT_TRUE(chunks);
  EXPECT_EQ(*chunks->bytes, bytes);
  EXPECT_EQ(chunks->transport, "zmq");
  EXPECT_EQ(remote.counters().bytes_via_shm, 0u);
}

// An older cache's copy: a /dev/shm file, no seals, no inode named. Hashed whole: used when it
// matches, never when a byte changed.
TEST(same_host_shm, AnUnsealedFileIsHashedAndACorruptOneNeverUsed) {
  auto ctx = zmq_ctx();
  const std::string bytes = random_bytes(3 * kChunk, 12);
  const std::string file = "/dev/shm/moerl-test-" + std::to_string(::getpid()) + ":weights:v6";
  std::ofstream(file, std::ios::binary) << bytes;
  {
    fake_cache old(ctx->handle(), bytes, {{"shm_path", file}});
    version_reader reader(ctx, 2000, true);
    auto got = reader.fetch(6, {old.endpoint()}, store_copy("the store's copy"));
    ASSERT_TRUE(got) << got.err().to_string();
    EXPECT_EQ(*got->bytes, bytes);
    EXPECT_EQ(got->transport, "shm");
    EXPECT_EQ(reader.counters().bytes_via_shm, bytes.size());
    EXPECT_EQ(reader.counters().bytes_via_sealed_shm, 0u);  // it was hashed
  }
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put(static_cast<char>(~bytes[100]));
  }
  {
    fake_cache old(ctx->handle(), bytes, {{"shm_path", file}});
    version_reader reader(ctx, 2000, true);
    auto got = reader.fetch(6, {old.endpoint()}, store_copy(bytes));
    ASSERT_TRUE(got) << got.err().to_string();
    EXPECT_EQ(got->transport, "store");
    EXPECT_EQ(reader.counters().bytes_via_shm, 0u);
  }
  std::filesystem::remove(file);
}

// A memfd named with its inode but never sealed (a cache that failed to seal it and offered it
// anyway): its bytes could have changed after the cache verified them, so they are hashed.
TEST(same_host_shm, AnUnsealedMemfdIsHashedEvenWhenItsInodeMatches) {
  auto ctx = zmq_ctx();
  const std::string bytes = random_bytes(2 * kChunk, 13);
  std::string changed = bytes;
  changed[kChunk] ^= 0x40;
  const int fd = unsealed_memfd(changed);
  fake_cache cache(ctx->handle(), bytes,
                   {{"shm_path", proc_fd_path(fd)}, {"shm_inode", inode_of(fd)}});
  version_reader reader(ctx, 2000, true);
  auto got = reader.fetch(2, {cache.endpoint()}, store_copy(bytes));
  ASSERT_TRUE(got) << got.err().to_string();
  EXPECT_EQ(got->transport, "store");
  EXPECT_EQ(*got->bytes, bytes);
  EXPECT_EQ(reader.counters().bytes_via_shm, 0u);
  ::close(fd);
}

TEST(same_host_shm, ACopyOfTheWrongSizeOrInodeIsRefusedNamingWhy) {
  const std::string bytes = random_bytes(kChunk, 14);
  auto copy = shm_copy::publish(3, bytes);
  ASSERT_TRUE(copy) << copy.err().to_string();
  auto right = read_shm_copy((*copy)->path(), bytes.size(), (*copy)->inode());
  ASSERT_TRUE(right) << right.err().to_string();
  EXPECT_TRUE(right->sealed);
  EXPECT_EQ(right->bytes, bytes);

  auto small = read_shm_copy((*copy)->path(), bytes.size() + 1, (*copy)->inode());
  ASSERT_FALSE(small);
  EXPECT_EQ(small.err().code, errc::invalid_argument);
  EXPECT_NE(small.err().message.find("holds " + std::to_string(bytes.size()) +
                                     " bytes, the version " + std::to_string(bytes.size() + 1)),
            std::string::npos)
      << small.err().message;

  auto other = read_shm_copy((*copy)->path(), bytes.size(), (*copy)->inode() + 1);
  ASSERT_FALSE(other);
  EXPECT_EQ(other.err().code, errc::invalid_argument);
  EXPECT_NE(other.err().message.find("not the cache's copy"), std::string::npos)
      << other.err().message;

  // The same sealed bytes without the inode named (not offered as a sealed copy): hash them.
  auto unnamed = read_shm_copy((*copy)->path(), bytes.size());
  ASSERT_TRUE(unnamed);
  EXPECT_FALSE(unnamed->sealed);

  // Through the reader: a sealed copy of the wrong size is refused, the store read instead.
  auto ctx = zmq_ctx();
  const std::string longer = bytes + "x";
  fake_cache cache(ctx->handle(), longer,
                   {{"shm_path", (*copy)->path()}, {"shm_inode", (*copy)->inode()}});
  version_reader reader(ctx, 2000, true);
  auto got = reader.fetch(3, {cache.endpoint()}, store_copy(longer));
  ASSERT_TRUE(got) << got.err().to_string();
  EXPECT_EQ(got->transport, "store");
  EXPECT_EQ(*got->bytes, longer);
}

TEST(same_host_shm, TheCopyGoesWithTheCache) {
  auto ctx = zmq_ctx();
  std::string path;
  uint64_t inode = 0;
  {
    served_cache cache(ctx, kChunk, ~0ull, true);
    const std::string bytes = random_bytes(kChunk, 15);
    auto pusher = cache_client::connect(ctx, cache.endpoint(), 2000);
    ASSERT_TRUE(pusher);
    ASSERT_TRUE(push_version(**pusher, 8, bytes, store::sha256_hex(bytes), kChunk));
    auto meta = (*pusher)->call(wire::kMeta, json{{"version", 8}, {"host", same_host_identity()}});
    ASSERT_TRUE(meta) << meta.err().to_string();
    path = meta->header.value("shm_path", std::string());
    inode = meta->header.value("shm_inode", uint64_t{0});
    ASSERT_FALSE(path.empty());
    EXPECT_TRUE(read_shm_copy(path, bytes.size(), inode));
  }
  // The descriptor is closed with the server: the path names nothing (or, were the number
  // reused, another file, which the inode check refuses).
  auto gone = read_shm_copy(path, kChunk, inode);
  EXPECT_FALSE(gone);
}

// A process killed with SIGKILL runs no destructor: its copies still vanish with its last
// descriptor, and nothing of it is left under /dev/shm (no sweeping needed).
TEST(same_host_shm, AKilledCachesCopyVanishesWithIt) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const std::string bytes = random_bytes(kChunk, 16);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    auto copy = shm_copy::publish(9, bytes);
    const std::string said =
        copy ? (*copy)->path() + " " + std::to_string((*copy)->inode()) : std::string("failed");
    (void)!::write(pipe_fds[1], said.data(), said.size());
    ::close(pipe_fds[1]);
    for (;;) ::pause();  // until killed
  }
  ::close(pipe_fds[1]);
  char buf[256] = {};
  const ssize_t n = ::read(pipe_fds[0], buf, sizeof buf - 1);
  ::close(pipe_fds[0]);
  ASSERT_GT(n, 0);
  const std::string said(buf, static_cast<size_t>(n));
  const auto space = said.find(' ');
  ASSERT_NE(space, std::string::npos) << said;
  const std::string path = said.substr(0, space);
  const uint64_t inode = std::stoull(said.substr(space + 1));
  // Another process of the same user reads it through /proc.
  auto seen = read_shm_copy(path, bytes.size(), inode);
  ASSERT_TRUE(seen) << seen.err().to_string();
  EXPECT_TRUE(seen->sealed);
  EXPECT_EQ(seen->bytes, bytes);

  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int st = 0;
  ASSERT_EQ(::waitpid(child, &st, 0), child);
  auto gone = read_shm_copy(path, bytes.size(), inode);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.err().code, errc::not_found) << gone.err().to_string();
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    EXPECT_NE(e.path().filename().string().rfind(std::to_string(child) + ":", 0), 0u) << e.path();
}

}  // namespace
}  // namespace moerl::weights
