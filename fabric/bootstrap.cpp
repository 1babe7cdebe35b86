#include "fabric/bootstrap.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "common/child_process.h"
#include "fabric/transport.h"

namespace moerl::fabric {

std::vector<int> all_members(const bootstrap& b) {
  std::vector<int> m(b.size());
  for (int i = 0; i < b.size(); ++i) m[i] = i;
  return m;
}

bool launch_report::all_ok() const {
  return std::all_of(exit_codes.begin(), exit_codes.end(), [](int c) { return c == 0; });
}

namespace {

std::string round_key(const std::vector<int>& members, uint64_t round) {
  std::string k;
  for (int m : members) k += std::to_string(m) + ",";
  return k + "#" + std::to_string(round);
}

status check_members(const std::vector<int>& members, int self, int size) {
  if (!std::is_sorted(members.begin(), members.end()) ||
      std::adjacent_find(members.begin(), members.end()) != members.end())
    return error{errc::invalid_argument, "bootstrap members must be sorted and unique"};
  if (!std::binary_search(members.begin(), members.end(), self))
    return error{errc::invalid_argument,
                 "bootstrap members do not include rank " + std::to_string(self)};
  if (members.front() < 0 || members.back() >= size)
    return error{errc::invalid_argument, "bootstrap member outside 0.." + std::to_string(size - 1)};
  return {};
}

std::string dead_list(const std::set<int>& dead, const std::vector<int>& members) {
  std::string s;
  for (int m : members)
    if (dead.count(m)) s += (s.empty() ? "" : ",") + std::to_string(m);
  return s;
}

// ---- the rendezvous rounds, shared by both implementations ---------------------------
struct rendezvous_table {
  struct round {
    std::vector<int> members;
    std::map<int, std::string> got;
  };
  std::map<std::string, round> pending;
  std::set<int> dead;

  bool any_dead(const std::vector<int>& members) const {
    return std::any_of(members.begin(), members.end(), [&](int m) { return dead.count(m) > 0; });
  }
  // Adds a contribution; returns true and fills `all` when the round is complete.
  bool submit(const std::string& key, const std::vector<int>& members, int rank,
              std::string payload, std::vector<std::string>& all) {
    round& r = pending[key];
    r.members = members;
    r.got[rank] = std::move(payload);
    if (r.got.size() < members.size()) return false;
    all.clear();
    for (int m : members) all.push_back(std::move(r.got[m]));
    pending.erase(key);
    return true;
  }
};

// ---- threads ------------------------------------------------------------------------
struct thread_hub {
  std::mutex mu;
  std::condition_variable cv;
  rendezvous_table table;
  struct finished {
    std::vector<std::string> all;
    size_t readers_left;
  };
  std::map<std::string, finished> done;
};

class thread_bootstrap final : public bootstrap {
 public:
  thread_bootstrap(std::shared_ptr<thread_hub> hub, int rank, int size)
      : hub_(std::move(hub)), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  result<std::vector<std::string>> allgather(const std::vector<int>& members,
                                             const std::string& mine, int64_t timeout_ms) override {
    if (auto st = check_members(members, rank_, size_); !st) return st.err();
    const std::string key = round_key(members, rounds_[members]++);
    std::unique_lock<std::mutex> lock(hub_->mu);
    if (hub_->table.any_dead(members))
      return error{errc::peer_dead,
                   "bootstrap members dead: " + dead_list(hub_->table.dead, members)};
    std::vector<std::string> all;
    if (hub_->table.submit(key, members, rank_, mine, all)) {
      hub_->done[key] = {std::move(all), members.size()};
      hub_->cv.notify_all();
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    const bool ready = hub_->cv.wait_until(
        lock, deadline, [&] { return hub_->done.count(key) > 0 || hub_->table.any_dead(members); });
    auto it = hub_->done.find(key);
    if (it != hub_->done.end()) {
      std::vector<std::string> out = it->second.all;
      if (--it->second.readers_left == 0) hub_->done.erase(it);
      return out;
    }
    if (ready)
      return error{errc::peer_dead,
                   "bootstrap members dead: " + dead_list(hub_->table.dead, members)};
    return error{errc::timeout, "bootstrap round " + key + " incomplete after " +
                                    std::to_string(timeout_ms) + " ms"};
  }

 private:
  std::shared_ptr<thread_hub> hub_;
  int rank_, size_;
  std::map<std::vector<int>, uint64_t> rounds_;
};

// ---- processes: frames over a socketpair ----------------------------------------------
// Frame: u32 length, then bytes. Request: key, members, payload. Reply: "1" + count +
// contributions, or "0" + message.
bool write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

void put_string(std::string& out, const std::string& s) {
  const uint32_t n = static_cast<uint32_t>(s.size());
  out.append(reinterpret_cast<const char*>(&n), 4);
  out += s;
}

bool get_string(const std::string& in, size_t& pos, std::string& s) {
  uint32_t n;
  if (pos + 4 > in.size()) return false;
  std::memcpy(&n, in.data() + pos, 4);
  pos += 4;
  if (pos + n > in.size()) return false;
  s.assign(in, pos, n);
  pos += n;
  return true;
}

bool send_frame(int fd, const std::string& body) {
  std::string f;
  put_string(f, body);
  return write_all(fd, f.data(), f.size());
}

bool recv_frame(int fd, std::string& body) {
  uint32_t n;
  if (!read_all(fd, &n, 4)) return false;
  body.resize(n);
  return n == 0 || read_all(fd, body.data(), n);
}

std::string encode_members(const std::vector<int>& members) {
  std::string s;
  for (int m : members) s.append(reinterpret_cast<const char*>(&m), sizeof m);
  return s;
}

class socket_bootstrap final : public bootstrap {
 public:
  socket_bootstrap(int fd, int rank, int size) : fd_(fd), rank_(rank), size_(size) {}
  ~socket_bootstrap() override { ::close(fd_); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  result<std::vector<std::string>> allgather(const std::vector<int>& members,
                                             const std::string& mine, int64_t timeout_ms) override {
    if (auto st = check_members(members, rank_, size_); !st) return st.err();
    const std::string key = round_key(members, rounds_[members]++);
    std::string req;
    put_string(req, key);
    put_string(req, encode_members(members));
    put_string(req, mine);
    if (!send_frame(fd_, req)) return error{errc::io_error, "bootstrap: launcher connection lost"};
    pollfd p{fd_, POLLIN, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(timeout_ms));
    if (rc == 0)
      return error{errc::timeout, "bootstrap round " + key + " incomplete after " +
                                      std::to_string(timeout_ms) + " ms"};
    std::string reply;
    if (rc < 0 || !recv_frame(fd_, reply) || reply.empty())
      return error{errc::io_error, "bootstrap: launcher connection lost"};
    size_t pos = 1;
    if (reply[0] == '0') {
      std::string msg;
      get_string(reply, pos, msg);
      return error{errc::peer_dead, msg};
    }
    std::vector<std::string> all(members.size());
    for (auto& s : all)
      if (!get_string(reply, pos, s))
        return error{errc::malformed_message, "bootstrap reply truncated"};
    return all;
  }

 private:
  int fd_, rank_, size_;
  std::map<std::vector<int>, uint64_t> rounds_;
};

// The launcher side: serves rounds for its children until all of them are reaped.
class process_hub {
 public:
  process_hub(std::vector<int> fds, std::vector<pid_t> pids)
      : fds_(std::move(fds)),
        pids_(std::move(pids)),
        codes_(pids_.size(), 0),
        reaped_(pids_.size(), false) {}

  launch_report run(int64_t timeout_ms) {
    const int64_t deadline = now_ns() + timeout_ms * 1000000;
    bool killed = false;
    while (!all_reaped()) {
      std::vector<pollfd> pfds;
      std::vector<int> ranks;
      for (size_t r = 0; r < fds_.size(); ++r)
        if (fds_[r] >= 0) {
          pfds.push_back({fds_[r], POLLIN, 0});
          ranks.push_back(static_cast<int>(r));
        }
      if (!pfds.empty())
        ::poll(pfds.data(), pfds.size(), 50);
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      for (size_t i = 0; i < pfds.size(); ++i)
        if (pfds[i].revents & (POLLIN | POLLHUP | POLLERR)) serve(ranks[i]);
      reap();
      if (!killed && now_ns() > deadline) {
        for (size_t r = 0; r < pids_.size(); ++r)
          if (!reaped_[r]) ::kill(pids_[r], SIGKILL);
        killed = true;
      }
    }
    for (int fd : fds_)
      if (fd >= 0) ::close(fd);
    return launch_report{codes_};
  }

 private:
  bool all_reaped() const {
    return std::all_of(reaped_.begin(), reaped_.end(), [](bool b) { return b; });
  }

  void reap() {
    for (size_t r = 0; r < pids_.size(); ++r) {
      if (reaped_[r]) continue;
      // poll_exit also removes the shm regions of a rank killed by a signal.
      auto polled = poll_exit(pids_[r]);
      if (polled && polled->has_value()) {
        const int st = **polled;
        reaped_[r] = true;
        codes_[r] = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
        mark_dead(static_cast<int>(r));
      }
    }
  }

  void fail(int rank, const std::string& msg) {
    if (fds_[rank] < 0) return;
    std::string body = "0";
    put_string(body, msg);
    send_frame(fds_[rank], body);
  }

  // A rank is gone: every pending round it belongs to fails for those waiting in it.
  void mark_dead(int rank) {
    if (fds_[rank] >= 0) {
      ::close(fds_[rank]);
      fds_[rank] = -1;
    }
    if (!table_.dead.insert(rank).second) return;
    for (auto it = table_.pending.begin(); it != table_.pending.end();) {
      const auto& members = it->second.members;
      if (std::binary_search(members.begin(), members.end(), rank)) {
        for (const auto& [waiting, payload] : it->second.got)
          fail(waiting, "bootstrap members dead: " + dead_list(table_.dead, members));
        it = table_.pending.erase(it);
      } else {
        ++it;
      }
    }
  }

  void serve(int rank) {
    std::string req;
    if (!recv_frame(fds_[rank], req)) {
      mark_dead(rank);
      return;
    }
    size_t pos = 0;
    std::string key, members_raw, payload;
    if (!get_string(req, pos, key) || !get_string(req, pos, members_raw) ||
        !get_string(req, pos, payload)) {
      fail(rank, "malformed bootstrap request");
      return;
    }
    std::vector<int> members(members_raw.size() / sizeof(int));
    std::memcpy(members.data(), members_raw.data(), members.size() * sizeof(int));
    if (table_.any_dead(members)) {
      fail(rank, "bootstrap members dead: " + dead_list(table_.dead, members));
      return;
    }
    std::vector<std::string> all;
    if (!table_.submit(key, members, rank, std::move(payload), all)) return;
    std::string body = "1";
    for (const auto& s : all) put_string(body, s);
    for (int m : members)
      if (fds_[m] >= 0) send_frame(fds_[m], body);
  }

  std::vector<int> fds_;
  std::vector<pid_t> pids_;
  std::vector<int> codes_;
  std::vector<bool> reaped_;
  rendezvous_table table_;
};

}  // namespace

result<launch_report> launch_processes(int num_ranks, const std::function<int(bootstrap&)>& body,
                                       int64_t timeout_ms) {
  if (num_ranks < 1) return error{errc::invalid_argument, "launch_processes needs >= 1 rank"};
  std::vector<int> parent_fds(num_ranks, -1);
  std::vector<pid_t> pids(num_ranks, -1);
  for (int r = 0; r < num_ranks; ++r) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
      return error{errc::io_error, std::string("socketpair: ") + std::strerror(errno)};
    const pid_t pid = ::fork();
    if (pid < 0) return error{errc::io_error, std::string("fork: ") + std::strerror(errno)};
    if (pid == 0) {
      ::close(sv[0]);
      for (int i = 0; i < r; ++i) ::close(parent_fds[i]);
      int code = 1;
      {
        socket_bootstrap b(sv[1], r, num_ranks);
        code = body(b);
      }
      std::fflush(stdout);
      std::fflush(stderr);
      ::_exit(code);
    }
    ::close(sv[1]);
    parent_fds[r] = sv[0];
    pids[r] = pid;
  }
  process_hub hub(std::move(parent_fds), std::move(pids));
  return hub.run(timeout_ms);
}

launch_report launch_threads(int num_ranks, const std::function<int(bootstrap&)>& body) {
  auto hub = std::make_shared<thread_hub>();
  launch_report report;
  report.exit_codes.assign(num_ranks, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < num_ranks; ++r) {
    threads.emplace_back([&, r] {
      int code = 1;
      try {
        thread_bootstrap b(hub, r, num_ranks);
        code = body(b);
      } catch (...) {
        code = 1;
      }
      report.exit_codes[r] = code;
      // A finished thread takes no part in later rounds: treat it as gone for the others.
      std::lock_guard<std::mutex> lock(hub->mu);
      hub->table.dead.insert(r);
      hub->cv.notify_all();
    });
  }
  for (auto& t : threads) t.join();
  return report;
}

}  // namespace moerl::fabric
