#include "workers/external_trainer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "workers/worker_protocol.h"

namespace moerl::workers {

external_trainer::external_trainer(external_trainer_options opts,
                                   external_trainer_handlers handlers, worker_spec spec)
    : opts_(std::move(opts)),
      handlers_(std::move(handlers)),
      link_(std::move(spec), {"trainer", opts_.start_timeout_ms, opts_.restart_backoff_ms, {}}) {}

external_trainer::~external_trainer() { link_.stop(1000); }

result<std::unique_ptr<external_trainer>> external_trainer::create(
    external_trainer_options opts, external_trainer_handlers handlers) {
  auto spec = parse_worker_spec(opts.worker, "trainer", opts.python);
  if (!spec) return spec.err();
  if (opts.file_prefix.empty() || opts.file_prefix[0] != '/')
    return error(errc::invalid_config, "external trainer: the tensor file prefix '" +
                                           opts.file_prefix + "' is not an absolute path");
  return std::unique_ptr<external_trainer>(
      new external_trainer(std::move(opts), std::move(handlers), std::move(*spec)));
}

void external_trainer::stop(int64_t grace_ms) {
  link_.stop(grace_ms);
  ready_ = false;
}

result<std::string> external_trainer::take_file(const nlohmann::json& msg) {
  auto p = msg.find("path");
  uint64_t size = 0;
  std::string detail;
  if (p == msg.end() || !p->is_string())
    return error(errc::malformed_message, "\"path\" is missing or not a string");
  if (!read_u64(msg, "bytes", size, detail)) return error(errc::malformed_message, detail);
  const std::string path = p->get<std::string>();
  // Only files under the node's prefix: a worker cannot have the node read (and remove)
  // anything else of the node's.
  if (path.rfind(opts_.file_prefix, 0) != 0 || path.find("/..") != std::string::npos ||
      path.find('/', opts_.file_prefix.size()) != std::string::npos)
    return error(errc::malformed_message,
                 "\"path\" " + path + " is not a file under " + opts_.file_prefix);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return error(errc::invalid_argument, "cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  std::string bytes;
  std::string why;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    why = "not a regular file";
  } else if (static_cast<uint64_t>(st.st_size) != size) {
    why = "it holds " + std::to_string(st.st_size) + " bytes, the request says " +
          std::to_string(size);
  } else {
    bytes.resize(size);
    size_t got = 0;
    while (got < size) {
      const ssize_t n = ::read(fd, bytes.data() + got, size - got);
      if (n <= 0) {
        why = n == 0 ? "short read" : std::strerror(errno);
        break;
      }
      got += static_cast<size_t>(n);
    }
  }
  ::close(fd);
  ::unlink(path.c_str());  // the node owns it now: read or refused, it does not stay in /dev/shm
  if (!why.empty()) return error(errc::invalid_argument, path + ": " + why);
  return bytes;
}

result<std::optional<nlohmann::json>> external_trainer::receive(int64_t timeout_ms) {
  auto& ch = link_.channel();
  const int64_t slice = opts_.group_abort ? 100 : timeout_ms;
  for (int64_t waited = 0;;) {
    if (opts_.group_abort && opts_.group_abort->load(std::memory_order_acquire)) {
      link_.drop("its trainer group broke");
      ready_ = false;
      return error(errc::peer_dead, "trainer worker of rank " + std::to_string(opts_.rank) +
                                        ": the trainer group broke (a member was lost)");
    }
    const int64_t wait = std::min(slice, timeout_ms - waited);
    auto got = ch.receive(wait);
    if (!got) {
      if (got.err().code == errc::malformed_message) {  // still in frame
        ++refused_;
        (void)ch.send(error_frame(refusal::malformed, got.err().message), 1000);
        continue;
      }
      link_.drop(got.err().to_string());
      ready_ = false;
      return error(errc::peer_dead, "trainer worker: " + link_.last_death());
    }
    if (*got) return std::optional<nlohmann::json>(std::move(**got));
    waited += wait;
    if (waited >= timeout_ms) return std::optional<nlohmann::json>();
  }
}

status external_trainer::serve_request(const nlohmann::json& msg, const std::string& type) {
  auto& ch = link_.channel();
  const bool publish = type == "publish";
  auto bytes = take_file(msg);
  if (!bytes && bytes.err().code == errc::malformed_message) {
    ++refused_;
    logger("trainer")->warn("trainer worker {} refused (malformed): {}", type, bytes.err().message);
    (void)ch.send(error_frame(refusal::malformed, bytes.err().message), 1000);
    return {};
  }
  result<nlohmann::json> done =
      bytes ? (publish ? handlers_.publish : handlers_.checkpoint)(std::move(*bytes), msg)
            : result<nlohmann::json>(bytes.err());
  nlohmann::json reply;
  if (done) {
    ++(publish ? publishes_ : checkpoints_);
    reply = done->is_object() ? *done : nlohmann::json::object();
    reply["type"] = publish ? "published" : "checkpointed";
  } else {
    ++failed_;
    logger("trainer")->warn("trainer worker's {} failed: {}", type, done.err().to_string());
    reply = {{"type", "request_failed"}, {"request", type}, {"error", done.err().to_string()}};
  }
  reply["v"] = kProtocolVersion;
  if (auto s = ch.send(reply, 10000); !s) {
    link_.drop("reply to " + type + ": " + s.err().to_string());
    ready_ = false;
    return error(errc::peer_dead, "trainer worker: " + link_.last_death());
  }
  return {};
}

void external_trainer::refuse(const checked& c) {
  ++refused_;
  logger("trainer")->warn("trainer worker message refused ({}): {}", refusal_name(c.why), c.detail);
  (void)link_.channel().send(error_frame(c.why, c.detail), 1000);
}

result<uint64_t> external_trainer::until_next() {
  for (;;) {
    auto got = receive(opts_.step_timeout_ms);
    if (!got) return got.err();
    if (!*got) {
      link_.drop("silent for trainer.worker_timeout_ms=" + std::to_string(opts_.step_timeout_ms));
      ready_ = false;
      return error(errc::timeout, "trainer worker: " + link_.last_death());
    }
    const auto& msg = **got;
    auto c = check_envelope(msg, {"next", "publish", "checkpoint"});
    if (c.ok && c.type == "next") {
      uint64_t wanted = 0;
      if (msg.contains("groups") && !read_u64(msg, "groups", wanted, c.detail)) {
        c.ok = false;
      } else {
        ready_ = true;
        return wanted;
      }
    }
    if (!c.ok) {
      refuse(c);
      continue;
    }
    if (auto st = serve_request(msg, c.type); !st) return st.err();
  }
}

status external_trainer::serve_member(const std::function<bool()>& stop) {
  if (auto s = start_worker(); !s) return s;
  const std::string who =
      "trainer rank " + std::to_string(opts_.rank) + " of " + std::to_string(opts_.world_size);
  for (;;) {
    if (stop()) {
      link_.stop(1000);
      return {};
    }
    auto got = receive(100);
    if (!got) return got.err();
    if (!*got) continue;
    const auto& msg = **got;
    auto c = check_envelope(msg, {"next", "publish", "checkpoint"});
    if (c.ok && c.type != "checkpoint") {
      if (c.type == "publish") (void)take_file(msg);  // a file under the prefix is removed
      c.ok = false;
      c.why = refusal::unknown_type;
      c.detail = c.type + " from " + who +
                 ": only rank 0 asks its node for batches and publishes (the SDK hands every "
                 "rank rank 0's batches and gathers publish to rank 0)";
    }
    if (!c.ok) {
      refuse(c);
      continue;
    }
    if (auto st = serve_request(msg, c.type); !st) return st;
  }
}

uint64_t external_trainer::starts() const { return link_.starts(); }

status external_trainer::start_worker() {
  if (link_.running()) return {};
  ready_ = false;
  if (handlers_.welcome) link_.set_welcome(handlers_.welcome());
  return link_.ensure_started();
}

status external_trainer::start() {
  if (link_.running()) return {};
  if (auto s = start_worker(); !s) return s;
  auto w = until_next();  // its first `next`, after it loaded its checkpoint
  if (!w) return w.err();
  return {};
}

result<uint64_t> external_trainer::hand(const nlohmann::json& groups, bool flush) {
  if (auto s = start(); !s) return s.err();
  if (!ready_) {  // a batch only answers a `next` (every failure above drops the worker)
    auto w = until_next();
    if (!w) return w.err();
  }
  ready_ = false;
  if (auto s = link_.channel().send(
          {{"v", kProtocolVersion}, {"type", "batch"}, {"flush", flush}, {"groups", groups}},
          opts_.step_timeout_ms);
      !s) {
    link_.drop("batch: " + s.err().to_string());
    return error(errc::peer_dead, "trainer worker: " + link_.last_death());
  }
  ++batches_;
  return until_next();
}

nlohmann::json external_trainer::stats() const {
  return {{"batches", batches_},
          {"publishes", publishes_},
          {"checkpoints", checkpoints_},
          {"refused_requests", refused_},
          {"failed_requests", failed_},
          {"worker_starts", link_.starts()},
          {"worker_deaths", link_.deaths()}};
}

}  // namespace moerl::workers
