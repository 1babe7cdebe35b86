#include "bench/weights/weights_bench.h"

#include <signal.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <thread>

#include "bench/support.h"
#include "bench/weights/weights_bench_publisher.h"
#include "bench/weights/weights_bench_reader.h"
#include "common/child_process.h"
#include "common/percentile.h"
#include "moto_server.h"
#include "provenance/provenance.h"
#include "sims/netns_link.h"
#include "sims/netns_switch.h"
#include "store/digest.h"
#include "store/object_store.h"
#include "weights/cache_client.h"
#include "weights/cache_server.h"
#include "weights/version_cache.h"
#include "zmq/check.h"
#include "zmq/context.h"
#include "zmq/parts.h"

#ifndef MOERL_MOTO_SCRIPT
#error "MOERL_MOTO_SCRIPT must name tests/store/moto_s3_server.py (bench/weights/CMakeLists.txt)"
#endif

namespace moerl::bench {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr uint64_t kVersion = kBenchVersion;
constexpr int kNetnsPort = 5555;           // every namespace has its own address: one port for all
constexpr int kReadyTimeoutMs = 120000;    // readers started on a loaded host
constexpr int kDeliverTimeoutMs = 600000;  // one delivery, the slowest path and size

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(bench_clock::now().time_since_epoch())
      .count();
}

json summary(std::vector<double> s) {
  std::sort(s.begin(), s.end());
  return {{"p50", nearest_rank_percentile(s, 50)},
          {"p99", nearest_rank_percentile(s, 99)},
          {"max", s.empty() ? 0.0 : s.back()},
          {"samples", s.size()}};
}

std::string self_executable() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("reading /proc/self/exe: " + ec.message());
  return p.string();
}

// A cache server answering on its own thread until destroyed.
class cache_thread {
 public:
  cache_thread(std::shared_ptr<zmq::zmq_context> ctx, const std::string& endpoint,
               std::shared_ptr<weights::version_cache> cache, uint64_t chunk_bytes,
               bool same_host_shm = false) {
    server_ = need(weights::cache_server::bind(ctx, endpoint, std::move(cache), chunk_bytes),
                   "binding a cache on " + endpoint);
    server_->enable_same_host_shm(same_host_shm);
    thread_ = std::thread([this] {
      while (!stop_)
        if (auto st = server_->poll(20); !st) failure_ = st.err().to_string();
    });
  }
  ~cache_thread() {
    stop_ = true;
    thread_.join();
  }
  const std::string& endpoint() const { return server_->endpoint(); }
  uint64_t bytes_served() const { return server_->counters().bytes_served; }

 private:
  std::unique_ptr<weights::cache_server> server_;
  std::atomic<bool> stop_{false};
  std::string failure_;
  std::thread thread_;
};

// The bench's side of the readers: a ROUTER every reader connects to.
class reader_fleet {
 public:
  // control: where readers reach the bench (a filesystem socket for readers in other
  // network namespaces).
  reader_fleet(std::shared_ptr<zmq::zmq_context> ctx, std::string exe, std::string log_dir,
               const std::string& control = "tcp://127.0.0.1:*")
      : ctx_(std::move(ctx)), exe_(std::move(exe)), log_dir_(std::move(log_dir)) {
    sock_ = zmq_socket(ctx_->handle(), ZMQ_ROUTER);
    int linger = 0;
    zmq_setsockopt(sock_, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_bind(sock_, control.c_str()) != 0)
      throw std::runtime_error(std::string("binding the control socket: ") +
                               zmq_strerror(zmq_errno()));
    char buf[256];
    size_t len = sizeof buf;
    zmq_getsockopt(sock_, ZMQ_LAST_ENDPOINT, buf, &len);
    endpoint_ = buf;
  }
  ~reader_fleet() {
    stop();
    zmq_close(sock_);
  }

  // Starts n readers of `source` at `at` and waits until each said ready. netns: reader i
  // runs on host i + 1 of it (host 0 holds the cache), its peer server on that host's address.
  void start(int n, const std::string& source, const std::string& at,
             const std::vector<std::string>& overrides, const std::vector<std::string>& reader_args,
             const sims::netns_switch* netns = nullptr) {
    for (int i = 0; i < n; ++i) {
      process_spec spec;
      spec.argv = {exe_,
                   "bench",
                   "weights-reader",
                   "--control",
                   endpoint_,
                   "--source",
                   source,
                   "--at",
                   at,
                   "--version",
                   std::to_string(kVersion)};
      for (const auto& o : overrides) {
        spec.argv.push_back("--set");
        spec.argv.push_back(o);
      }
      spec.argv.insert(spec.argv.end(), reader_args.begin(), reader_args.end());
      std::vector<std::string> prefix;
      if (netns) {
        prefix = netns->exec_prefix(i + 1);
        spec.argv.push_back("--bind");
        spec.argv.push_back("tcp://" + sims::netns_switch::address(i + 1) + ":" +
                            std::to_string(kNetnsPort));
      }
      const std::string log = log_dir_ + "/reader-" + std::to_string(num_started_++) + ".log";
      logs_.push_back(log);
      pids_.push_back(need(spawn_process(spec, prefix, log, process_group::inherit),
                           "starting reader process " + std::to_string(i)));
    }
    while (identities_.size() < pids_.size()) {
      auto m = receive(kReadyTimeoutMs, "ready");
      identities_.push_back(m.first);
      const json r = json::parse(m.second, nullptr, false);
      // A fan-out reader says where it serves its peers: every reader gets the same list.
      if (r.is_object() && r.contains("endpoint"))
        endpoints_.push_back(r["endpoint"].get<std::string>());
    }
  }

  // One delivery of `version`: seconds from "go" until the last reader held a verified copy.
  // Adds the bytes the readers read from one another to *peer_bytes, and each reader's own
  // seconds from "go" to its copy to *reader_s.
  double deliver(uint64_t version, uint64_t* peer_bytes, std::vector<double>* reader_s) {
    const std::string go = json{{"version", version}, {"readers", endpoints_}}.dump();
    const int64_t go_ns = steady_ns();
    for (const auto& id : identities_) send(id, "go", go);
    int64_t last_ns = go_ns;
    for (size_t k = 0; k < identities_.size(); ++k) {
      auto m = receive(kDeliverTimeoutMs, "done");
      const json a = json::parse(m.second, nullptr, false);
      if (!a.is_object() || !a.value("ok", false))
        throw std::runtime_error("a reader failed: " +
                                 (a.is_object() ? a.value("error", m.second) : m.second));
      const int64_t done_ns = a.value("done_ns", int64_t{0});
      last_ns = std::max(last_ns, done_ns);
      reader_s->push_back(double(done_ns - go_ns) * 1e-9);
      *peer_bytes += a.value("peer_bytes", uint64_t{0});
    }
    return double(last_ns - go_ns) * 1e-9;
  }

  void stop() {
    for (const auto& id : identities_) send(id, "exit");
    for (pid_t p : pids_) {
      auto st = wait_exit(p, 30000);
      if (!st) {
        (void)send_signal(p, SIGKILL);
        (void)wait_exit(p, 5000);
      }
    }
    pids_.clear();
    logs_.clear();
    identities_.clear();
    endpoints_.clear();
  }

 private:
  void send(const std::string& id, const std::string& word, const std::string& body = "") {
    zmq_send(sock_, id.data(), id.size(), ZMQ_SNDMORE);
    zmq_send(sock_, word.data(), word.size(), body.empty() ? 0 : ZMQ_SNDMORE);
    if (!body.empty()) zmq_send(sock_, body.data(), body.size(), 0);
  }
  // The next [identity][word][body] message; `word` is what is expected.
  std::pair<std::string, std::string> receive(int timeout_ms, const std::string& word) {
    const auto deadline = bench_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      for (size_t i = 0; i < pids_.size(); ++i) {
        auto ex = poll_exit(pids_[i]);
        if (ex && *ex)
          throw std::runtime_error("reader process " + std::to_string(pids_[i]) + " ended (" +
                                   describe_wait_status(**ex) + "); its log: " + logs_[i]);
      }
      if (bench_clock::now() > deadline)
        throw std::runtime_error("no reader answered '" + word + "' within " +
                                 std::to_string(timeout_ms) + " ms");
      zmq_pollitem_t item{sock_, 0, ZMQ_POLLIN, 0};
      if (zmq_poll(&item, 1, 200) <= 0) continue;
      auto parts =
          need(zmq::recv_message_parts(sock_, "zmq_msg_recv(ROUTER)"), "receiving from a reader");
      if (parts.size() == 3 && parts[1] == word) return {parts[0], parts[2]};
    }
  }

  std::shared_ptr<zmq::zmq_context> ctx_;
  std::string exe_, log_dir_, endpoint_;
  void* sock_ = nullptr;
  std::vector<pid_t> pids_;
  std::vector<std::string> logs_, identities_, endpoints_;
  int num_started_ = 0;
};

// A cache process: `moerl bench weights-cache` (bench/weights/weights_bench_cache.h) bound on
// `at`, run with `prefix` (a netns combination's host 0; none beside the bench); ended
// (SIGTERM) when destroyed. fabric_provider: it takes fabric puts (the push paths).
class cache_process {
 public:
  cache_process(const std::string& exe, const std::vector<std::string>& prefix,
                const std::string& at, int64_t size, int num_versions, uint64_t chunk_bytes,
                const fs::path& scratch, const std::string& fabric_provider = "") {
    const fs::path ready = scratch / "cache.ready";
    fs::remove(ready);
    process_spec spec;
    spec.argv = {exe,
                 "bench",
                 "weights-cache",
                 "--bind",
                 at,
                 "--bytes",
                 std::to_string(size),
                 "--versions",
                 std::to_string(num_versions),
                 "--chunk-bytes",
                 std::to_string(chunk_bytes),
                 "--ready",
                 ready.string()};
    if (!fabric_provider.empty()) {
      spec.argv.push_back("--fabric-puts");
      spec.argv.push_back(fabric_provider);
    }
    const std::string log = (scratch / "cache.log").string();
    pid_ = need(spawn_process(spec, prefix, log, process_group::inherit),
                "starting the cache process");
    const auto deadline = bench_clock::now() + std::chrono::milliseconds(kReadyTimeoutMs);
    while (!fs::exists(ready)) {
      auto ex = poll_exit(pid_);
      if (ex && *ex)
        throw std::runtime_error("the cache process ended (" + describe_wait_status(**ex) +
                                 "); its log: " + log);
      if (bench_clock::now() > deadline)
        throw std::runtime_error("the cache process did not start; its log: " + log);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::ifstream(ready) >> endpoint_;
  }
  ~cache_process() {
    (void)send_signal(pid_, SIGTERM);
    if (!wait_exit(pid_, 10000)) {
      (void)send_signal(pid_, SIGKILL);
      (void)wait_exit(pid_, 5000);
    }
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  pid_t pid_ = -1;
  std::string endpoint_;  // as bound
};

// A helper process of the bench (`moerl bench <role> ARGS --out FILE`, run with `prefix`):
// its report file (bench/support.h write_report_file), once it exited.
json run_for_report(const std::string& exe, const std::string& role,
                    const std::vector<std::string>& args, const std::vector<std::string>& prefix,
                    const fs::path& scratch) {
  const fs::path out = scratch / (role + ".json");
  fs::remove(out);
  process_spec spec;
  spec.argv = {exe, "bench", role};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.argv.push_back("--out");
  spec.argv.push_back(out.string());
  const std::string log = (scratch / (role + ".log")).string();
  const pid_t pid = need(spawn_process(spec, prefix, log, process_group::inherit),
                         "starting the " + role + " process");
  const int ws = need(wait_exit(pid, kDeliverTimeoutMs), "the " + role + " process");
  std::ifstream in(out);
  const json r = json::parse(in, nullptr, false);
  if (ws != 0 || !r.is_object())
    throw std::runtime_error("the " + role + " process ended (" + describe_wait_status(ws) +
                             ") without a report; its log: " + log);
  return r;
}

// One push combination (bench/weights/weights_bench_pusher.h): a pusher process (with
// `prefix`) puts `size` bytes to the cache at `at` by ZeroMQ and by the fabric in turn; its
// report, once it exited.
json run_pusher(const std::string& exe, const std::vector<std::string>& prefix,
                const std::string& at, int64_t size, const weights_bench_options& opt,
                uint64_t chunk_bytes, const std::string& provider, const fs::path& scratch) {
  return run_for_report(exe, "weights-pusher",
                        {"--at", at, "--bytes", std::to_string(size), "--reps",
                         std::to_string(opt.reps), "--warmup", std::to_string(opt.warmup),
                         "--chunk-bytes", std::to_string(chunk_bytes), "--provider", provider},
                        prefix, scratch);
}

// Where one path's readers read, set up for one size.
struct source {
  std::string path, transport, kind, at;  // kind: "cache", "cache_shm", "fanout" or "store"
  std::vector<std::string> overrides;
  std::vector<std::string> reader_args;  // more arguments for its reader processes
};

}  // namespace

json run_weights_bench(const weights_bench_options& opt, const config& cfg) {
  const std::vector<double> load_start = host_load_average();
  const std::string exe = opt.moerl_binary.empty() ? self_executable() : opt.moerl_binary;
  const uint64_t chunk_bytes = static_cast<uint64_t>(cfg.get_int("weights.chunk_bytes"));
  for (const auto& p : opt.paths)
    if (p != "cache_tcp" && p != "cache_ipc" && p != "cache_shm" && p != "fanout_tcp" &&
        p != "cache_netns" && p != "fanout_netns" && p != "store_local" && p != "store_s3" &&
        p != "store_s3_netns" && p != "push_host" && p != "push_netns")
      throw std::runtime_error("unknown path '" + p +
                               "' (cache_tcp, cache_ipc, cache_shm, fanout_tcp, cache_netns, "
                               "fanout_netns, store_local, store_s3, store_s3_netns, push_host, "
                               "push_netns)");
  auto wants = [&](const char* p) {
    return std::find(opt.paths.begin(), opt.paths.end(), p) != opt.paths.end();
  };

  const fs::path scratch =
      fs::temp_directory_path() / ("moerl-weights-bench-" + std::to_string(std::random_device{}()));
  fs::create_directories(scratch);
  struct remover {
    fs::path p;
    ~remover() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } remove_scratch{scratch};

  auto ctx = need(zmq::zmq_context::create(), "creating a ZeroMQ context");
  json skipped = json::array();

  // The S3 paths: a moto server each, its credentials exported (store::testing::
  // export_credentials) before its readers start, which inherit them.
  const std::string moto_script = opt.moto_script.empty() ? MOERL_MOTO_SCRIPT : opt.moto_script;
  constexpr int kMotoStartMs = 120000;  // python imports boto3 and moto on a loaded host
  const bool have_moto =
      (wants("store_s3") || wants("store_s3_netns")) && store::testing::python_has_moto();
  const char* no_moto = "/usr/bin/python3 cannot import moto (scripts/install-deps.sh)";
  std::unique_ptr<store::testing::moto_server> moto;
  std::string s3_url;
  std::vector<std::string> s3_overrides;
  if (wants("store_s3")) {
    if (!have_moto) {
      skipped.push_back({{"path", "store_s3"}, {"why", no_moto}});
    } else {
      moto = need(store::testing::moto_server::start(moto_script, kMotoStartMs), "starting moto");
      const auto& m = moto->info();
      s3_url = "s3://" + m.bucket + "/bench";
      s3_overrides = {"store.s3_endpoint=" + m.endpoint, "store.s3_region=" + m.region};
    }
  }

  // The netns paths: each reader on a "host" of its own (sims/netns_switch.h), root only.
  std::string netns_unavailable;
  if (wants("cache_netns") || wants("fanout_netns") || wants("store_s3_netns") ||
      wants("push_netns")) {
    netns_unavailable = sims::netns_link::unavailable_reason();
    if (!netns_unavailable.empty())
      for (const char* p : {"cache_netns", "fanout_netns", "store_s3_netns", "push_netns"})
        if (wants(p)) skipped.push_back({{"path", p}, {"why", netns_unavailable}});
  }
  if (wants("store_s3_netns") && netns_unavailable.empty() && !have_moto)
    skipped.push_back({{"path", "store_s3_netns"}, {"why", no_moto}});
  // moto holds every GET's whole body in memory: such combinations are listed, not run.
  const auto over_s3_inflight = [&](const char* path, int n, int64_t size) {
    if (int64_t(n) * size <= opt.s3_max_inflight_bytes) return false;
    skipped.push_back(
        {{"path", path},
         {"readers", n},
         {"version_bytes", size},
         {"why",
          "readers x bytes over --s3-max-inflight-bytes (moto holds each response in memory)"}});
    return true;
  };

  json paths = json::array(), publish = json::array(), push = json::array(),
       memcpy_runs = json::array();
  std::vector<double> memcpy_gbps_all;
  for (int64_t size : opt.sizes) {
    const std::string bytes = random_payload(size, static_cast<uint64_t>(size));

    // The baseline: memcpy of the same bytes into memory already faulted in.
    std::vector<double> memcpy_s;
    {
      std::string dst(bytes.size(), '\1');
      for (int r = 0; r < opt.warmup + opt.reps; ++r) {
        const auto t0 = bench_clock::now();
        std::memcpy(dst.data(), bytes.data(), bytes.size());
        if (r >= opt.warmup) memcpy_s.push_back(seconds_since(t0));
      }
      if (dst != bytes) throw std::runtime_error("memcpy baseline copied wrong bytes");
    }
    const double memcpy_p50 = percentile_of(memcpy_s, 50);
    const double memcpy_gbps = double(size) / memcpy_p50 / 1e9;
    memcpy_gbps_all.push_back(memcpy_gbps);
    memcpy_runs.push_back(
        {{"version_bytes", size}, {"seconds", summary(memcpy_s)}, {"gbps", memcpy_gbps}});

    // Publish once per place, timed once (what the trainer does for each version).
    // Fan-out readers keep what they read (they serve it), so each of its deliveries reads a
    // version of its own: versions kVersion + 1.. hold the same bytes (shared, not copied).
    const int num_deliveries = opt.warmup + opt.reps;
    auto cache = std::make_shared<weights::version_cache>(
        2 + num_deliveries, static_cast<uint64_t>(size) * (2 + num_deliveries));
    std::vector<std::unique_ptr<cache_thread>> caches;
    std::vector<source> sources;
    if (wants("cache_tcp") || wants("cache_ipc") || wants("cache_shm") || wants("fanout_tcp")) {
      auto tcp = std::make_unique<cache_thread>(ctx, "tcp://127.0.0.1:*", cache, chunk_bytes);
      const std::string hash = store::sha256_hex(bytes);
      auto pusher = need(weights::cache_client::connect(ctx, tcp->endpoint(), 60000), "connect");
      const auto t0 = bench_clock::now();
      need(weights::push_version(*pusher, kVersion, bytes, hash, chunk_bytes), "push to the cache");
      publish.push_back({{"path", "cache"},
                         {"transport", "tcp"},
                         {"version_bytes", size},
                         {"publish_s", seconds_since(t0)}});
      if (wants("cache_tcp")) sources.push_back({"cache", "tcp", "cache", tcp->endpoint(), {}, {}});
      if (wants("fanout_tcp")) {
        auto held = need(cache->find(kVersion), "the pushed version");
        for (int d = 0; d < num_deliveries; ++d) {
          weights::cached_version copy = *held;
          copy.version = kVersion + 1 + d;
          need(cache->insert(std::move(copy)), "a fan-out delivery's version");
        }
        // The readers read from one another (weights/FANOUT.md); the root reads the cache.
        sources.push_back({"fanout",
                           "tcp",
                           "fanout",
                           tcp->endpoint(),
                           {},
                           {"--degree", std::to_string(opt.fanout_degree)}});
      }
      if (wants("cache_ipc")) {
        // The same cache memory behind a unix-domain socket: a second server on one cache.
        auto ipc = std::make_unique<cache_thread>(ctx, "ipc://" + (scratch / "cache.ipc").string(),
                                                  cache, chunk_bytes);
        sources.push_back({"cache", "ipc", "cache", ipc->endpoint(), {}, {}});
        caches.push_back(std::move(ipc));
      }
      if (wants("cache_shm")) {
        // The same cache memory again, its same-host path on: readers ask for the /dev/shm
        // copy (weights/shm_copy.h) and read it in one pass, as rollouts on its host do.
        auto shm = std::make_unique<cache_thread>(ctx, "tcp://127.0.0.1:*", cache, chunk_bytes,
                                                  /*same_host_shm=*/true);
        sources.push_back({"cache", "shm", "cache_shm", shm->endpoint(), {}, {}});
        caches.push_back(std::move(shm));
      }
      caches.push_back(std::move(tcp));
    }
    auto publish_to = [&](const std::string& url, const std::vector<std::string>& overrides,
                          const char* path, const char* transport) {
      config c = cfg;
      for (const auto& o : overrides) {
        const auto eq = o.find('=');
        need(c.set(o.substr(0, eq), o.substr(eq + 1), "weights bench"), "config " + o);
      }
      auto s = need(store::open_store(url, c), "opening " + url);
      const auto t0 = bench_clock::now();
      need(put_bench_version(*s, bytes), "publishing to " + url);
      publish.push_back({{"path", path},
                         {"transport", transport},
                         {"version_bytes", size},
                         {"publish_s", seconds_since(t0)}});
      sources.push_back({path, transport, "store", url, overrides, {}});
    };
    if (wants("store_local"))
      publish_to((scratch / "store").string(), {"store.local_fsync=false"}, "store_local", "file");
    if (moto) {
      store::testing::export_credentials(moto->info());  // store_s3_netns's may be set
      publish_to(s3_url, s3_overrides, "store_s3", "http");
    }

    // Times num_deliveries deliveries to the fleet's readers; one row of the report.
    const auto record = [&](reader_fleet& fleet, const source& src, int n) {
      std::vector<double> deliver_s, reader_s;
      uint64_t peer_bytes = 0;
      for (int r = 0; r < num_deliveries; ++r) {
        // Fan-out readers keep what they read: each delivery is a version of its own.
        const uint64_t version = src.kind == "fanout" ? kVersion + 1 + r : kVersion;
        std::vector<double> each;
        const double s = fleet.deliver(version, &peer_bytes, &each);
        if (r >= opt.warmup) {
          deliver_s.push_back(s);
          reader_s.insert(reader_s.end(), each.begin(), each.end());
        }
      }
      fleet.stop();
      const double p50 = percentile_of(deliver_s, 50);
      const double gbps = double(n) * double(size) / p50 / 1e9;
      paths.push_back({{"path", src.path},
                       {"transport", src.transport},
                       {"readers", n},
                       {"version_bytes", size},
                       {"deliver_s", summary(deliver_s)},
                       // every reader's own time in the timed deliveries: how far from the
                       // last one the others were (a shared uplink ends them together).
                       {"reader_s", summary(reader_s)},
                       {"aggregate_gbps", gbps},
                       {"memcpy_gbps", memcpy_gbps},
                       {"ratio_to_memcpy", gbps / memcpy_gbps},
                       {"peer_bytes", peer_bytes}});
    };
    for (const auto& src : sources) {
      for (int n : opt.readers) {
        if (src.path == "store_s3") {
          if (over_s3_inflight("store_s3", n, size)) continue;
          store::testing::export_credentials(moto->info());  // store_s3_netns has its own
        }
        reader_fleet fleet(ctx, exe, scratch.string());
        fleet.start(n, src.kind, src.at, src.overrides, src.reader_args);
        record(fleet, src, n);
      }
    }
    for (const char* p : {"cache_netns", "fanout_netns"}) {
      if (!wants(p) || !netns_unavailable.empty()) continue;
      const bool fan = std::string(p) == "fanout_netns";
      for (int n : opt.readers) {
        // A fresh switch per combination: its cache and n readers, each on a host.
        auto net = need(sims::netns_switch::create(n + 1, opt.netns_link_mbit),
                        "making " + std::to_string(n + 1) + " network namespaces");
        const std::string at =
            "tcp://" + sims::netns_switch::address(0) + ":" + std::to_string(kNetnsPort);
        cache_process cache(exe, net->exec_prefix(0), at, size, 1 + num_deliveries, chunk_bytes,
                            scratch);
        source src{fan ? "fanout" : "cache", "netns", fan ? "fanout" : "cache", at, {}, {}};
        if (fan) src.reader_args = {"--degree", std::to_string(opt.fanout_degree)};
        reader_fleet fleet(ctx, exe, scratch.string(),
                           "ipc://" + (scratch / ("control-" + std::string(p) + ".ipc")).string());
        fleet.start(n, src.kind, src.at, src.overrides, src.reader_args, net.get());
        record(fleet, src, n);
      }
    }
    // The S3 path between hosts: moto on host 0 of one switch (where cache_netns puts its
    // cache: the same address, the same shaped egress), the version published to it once by
    // a process beside it (the bench's namespace cannot reach the switch), and reader i on
    // host i + 1 reading it as store_s3's readers do, through that host's link.
    if (wants("store_s3_netns") && netns_unavailable.empty() && have_moto) {
      std::vector<int> counts;
      for (int n : opt.readers)
        if (!over_s3_inflight("store_s3_netns", n, size)) counts.push_back(n);
      if (!counts.empty()) {
        const int hosts = 1 + *std::max_element(counts.begin(), counts.end());
        auto net = need(sims::netns_switch::create(hosts, opt.netns_link_mbit),
                        "making " + std::to_string(hosts) + " network namespaces");
        auto s3 = need(
            store::testing::moto_server::start(
                moto_script, kMotoStartMs, {sims::netns_switch::address(0), net->exec_prefix(0)}),
            "starting moto on host 0");
        const auto& m = s3->info();
        store::testing::export_credentials(m);
        const std::string url = "s3://" + m.bucket + "/bench";
        const std::vector<std::string> overrides = {"store.s3_endpoint=" + m.endpoint,
                                                    "store.s3_region=" + m.region};
        std::vector<std::string> args = {"--url", url, "--bytes", std::to_string(size)};
        for (const auto& o : overrides) {
          args.push_back("--set");
          args.push_back(o);
        }
        const json pub =
            run_for_report(exe, "weights-publisher", args, net->exec_prefix(0), scratch);
        publish.push_back({{"path", "store_s3_netns"},
                           {"transport", "netns"},
                           {"version_bytes", size},
                           {"publish_s", pub.value("publish_s", 0.0)}});
        const source src{"store_s3_netns", "netns", "store", url, overrides, {}};
        for (int n : counts) {
          reader_fleet fleet(ctx, exe, scratch.string(),
                             "ipc://" + (scratch / "control-store_s3_netns.ipc").string());
          fleet.start(n, src.kind, src.at, src.overrides, src.reader_args, net.get());
          record(fleet, src, n);
        }
      }
    }
    // A trainer member's shard put to a cache, by ZeroMQ and by the fabric (issue 27), from a
    // process beside the cache (same host: stores into its memfd) or on another "host"
    // (tcp;ofi_rxm RMA writes across namespaces).
    for (const char* p : {"push_host", "push_netns"}) {
      if (!wants(p)) continue;
      const bool across = std::string(p) == "push_netns";
      if (across && !netns_unavailable.empty()) continue;
      std::unique_ptr<sims::netns_switch> net;
      if (across) net = need(sims::netns_switch::create(2, opt.netns_link_mbit), "2 namespaces");
      const std::string provider = across ? "tcp;ofi_rxm" : "auto";
      const std::string bind =
          across ? "tcp://" + sims::netns_switch::address(0) + ":" + std::to_string(kNetnsPort)
                 : "tcp://127.0.0.1:*";
      cache_process cache(exe, net ? net->exec_prefix(0) : std::vector<std::string>(), bind, size,
                          0, chunk_bytes, scratch, provider);
      const json r = run_pusher(exe, net ? net->exec_prefix(1) : std::vector<std::string>(),
                                cache.endpoint(), size, opt, chunk_bytes, provider, scratch);
      const double zmq_p50 = percentile_of(r["zmq_s"].get<std::vector<double>>(), 50);
      for (const char* via : {"zmq", "fabric"}) {
        const auto put_s = r[std::string(via) + "_s"].get<std::vector<double>>();
        const double p50 = percentile_of(put_s, 50);
        push.push_back({{"path", p},
                        {"transport", via},
                        {"version_bytes", size},
                        {"put_s", summary(put_s)},
                        {"gbps", double(size) / p50 / 1e9},
                        {"ratio_to_zmq", zmq_p50 / p50},
                        {"fabric_path", r["fabric_path"]},
                        {"fabric_provider", r["provider"]}});
      }
    }
  }
  return {{"benchmark", "weights"},
          {"memcpy_gbps", memcpy_gbps_all.empty() ? 0.0 : percentile_of(memcpy_gbps_all, 50)},
          {"memcpy", memcpy_runs},
          {"paths", paths},
          {"publish", publish},
          {"push", push},
          {"skipped", skipped},
          {"options",
           {{"sizes", opt.sizes},
            {"readers", opt.readers},
            {"paths", opt.paths},
            {"reps", opt.reps},
            {"warmup", opt.warmup},
            {"chunk_bytes", chunk_bytes},
            {"fanout_degree", opt.fanout_degree},
            {"netns_link_mbit", opt.netns_link_mbit},
            {"s3_max_inflight_bytes", opt.s3_max_inflight_bytes}}},
          {"load_average", {{"start", load_start}, {"end", host_load_average()}}},
          {"provenance", collect_provenance()}};
}

}  // namespace moerl::bench
