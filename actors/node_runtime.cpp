#include "actors/node_runtime.h"
#include "actors/internal/control_priority.h"
#include "common/json_text.h"

#include <signal.h>
#include <unistd.h>

#include <condition_variable>
#include <iostream>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/atoms.h"
#include "actors/coordinator.h"
#include "actors/imds_poller.h"
#include "actors/internal/admin_call.h"
#include "actors/internal/node_agent.h"
#include "actors/internal/signal_watch.h"
#include "actors/interruption.h"
#include "actors/node_identity.h"
#include "common/advertised_endpoint.h"
#include "common/log.h"
#include "common/shm_leftovers.h"
#include "console/console_server.h"
#include "console/http_console.h"
#include "env/env_server.h"
#include "fabric/transport.h"
#include "ledger/clock.h"
#include "store/object_store.h"
#include "zmq/plane_context.h"

namespace moerl::actors {
namespace {

// Whole versions a rollout node's peer server keeps (weights.fanout): the newest and the one
// before, which a slower peer may still be reading.
constexpr uint64_t kPeerVersionsHeld = 2;

// Signals can arrive before the actor that handles them exists: park them until then.
class signal_relay {
 public:
  void deliver(int sig) {
    std::lock_guard<std::mutex> g(mu_);
    if (fn_)
      fn_(sig);
    else
      early_.push_back(sig);
  }
  void set(std::function<void(int)> fn) {
    std::lock_guard<std::mutex> g(mu_);
    fn_ = std::move(fn);
    for (int s : early_) fn_(s);
    early_.clear();
  }

 private:
  std::mutex mu_;
  std::function<void(int)> fn_;
  std::vector<int> early_;
};

int wait_for(caf::actor_system& sys, const caf::actor& a) {
  caf::scoped_actor self{sys};
  self->monitor(a);
  self->receive([](caf::down_msg&) {});
  return 0;
}

// The groups' history lives beside the ledger in the store: a restarted coordinator reads
// what its predecessor saved (incarnations go on, earlier re-formations stay in the report),
// then saves every change. A malformed object is reported and the run starts without it: the
// history is the report's and the incarnations' continuity, never the ledger's safety.
status keep_group_history(coordinator_core& core, store::object_store& store,
                          const std::string& key) {
  auto log = logger("node");
  if (auto saved = store.get(key); saved) {
    auto j = nlohmann::json::parse(*saved, nullptr, false);
    auto st = j.is_discarded() ? status(error{errc::invalid_argument, "group history: not JSON"})
                               : core.groups().restore_history(j, core.now_ms());
    if (st)
      log->info("groups' history restored from {}", key);
    else
      log->error("{} in {}: starting without it", st.err().to_string(), key);
  } else if (saved.err().code != errc::not_found) {
    return error{saved.err().code,
                 "reading the groups' history " + key + ": " + saved.err().message};
  }
  core.set_group_history_sink(
      [&store, key](const nlohmann::json& j) { return store.put(key, json_text(j)); });
  return ok_status();
}

int run_coordinator(config& cfg, control_plane_options& cp, signal_relay& relay,
                    const std::string& host, uint16_t port, const std::string& node_id) {
  auto log = logger("node");
  // The coordinator is all control plane: every thread it starts from here on inherits this.
  prioritize_this_thread(static_cast<int>(cfg.get_int("node.control_nice")));
  auto copts = coordinator_options::from_config(cfg);
  if (!copts) {
    log->error("{}", copts.err().to_string());
    return 2;
  }
  auto lopts = ledger::ledger_options::from_config(cfg);
  if (!lopts) {
    log->error("{}", lopts.err().to_string());
    return 2;
  }
  auto store = store::open_store(cfg.get_string("store.url"), cfg);
  if (!store) {
    log->error("ledger store: {}", store.err().to_string());
    return 2;
  }
  static ledger::steady_clock_source clock;
  ledger::recovery_info info;
  auto led = ledger::work_ledger::open(*lopts, clock, store->get(), &info);
  if (!led) {
    log->error("ledger: {}", led.err().to_string());
    return 2;
  }
  log->info("ledger at {} epoch {} ({}; {} records replayed, {} leases expired)",
            (*store)->describe(), info.epoch, info.recovered ? "recovered" : "fresh",
            info.records_replayed, info.leases_expired);
  auto core = std::make_unique<coordinator_core>(*copts, std::move(*led), clock);
  if (auto st = keep_group_history(*core, **store, lopts->store_prefix + "/groups.json"); !st) {
    log->error("{}", st.err().to_string());
    return 2;
  }

  node_caf_config ccfg(cp);
  caf::actor_system sys{ccfg};
  auto coord = spawn_coordinator(sys, std::move(core));
  auto bound = publish_actor(sys, cp, coord, host, port);
  if (!bound) {
    log->error("{}", bound.err().to_string());
    caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
    return 2;
  }
  log->info("coordinator {} listening on {}:{}{}", node_id.substr(0, 8), host, *bound,
            cp.tls ? " (TLS)" : "");
  // The HTTP console first: whoever sees the ZeroMQ console answer (moerl up) finds it bound.
  auto http = console::start_http_console(coordinator_admin_channel(sys, coord), cfg,
                                          static_cast<int>(cp.request_timeout_ms));
  if (!http) {
    log->error("{}", http.err().to_string());
    caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
    return 2;
  }
  auto admin_keys = zmq::admin_plane_keys(cfg, cfg.get_string("console.address"));
  zmq::set_listener_limits(cfg);  // the admin console's socket is bounded like the planes'
  if (!admin_keys) {
    log->error("console: {}", admin_keys.err().to_string());
    caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
    return 2;
  }
  auto console = console::console_server::start(
      coordinator_admin_channel(sys, coord), cfg.get_string("console.address"),
      static_cast<int>(cp.request_timeout_ms), std::move(*admin_keys));
  if (!console) {
    log->error("{}", console.err().to_string());
    caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
    return 2;
  }
  log->info("console on {}", (*console)->address());
  relay.set([coord](int sig) {
    logger("node")->warn(
        "signal {}: coordinator stops (the ledger is durable; a restart recovers it)", sig);
    caf::anon_send(coord, shutdown_atom::value);
  });
  wait_for(sys, coord);
  if (*http) (*http)->stop();
  (*console)->stop();
  relay.set([](int) {});
  return 0;
}

int run_member(node_args const& args, node_role role, config& cfg, control_plane_options& cp,
               signal_relay& relay, const std::string& host, uint16_t port,
               const std::string& node_id) {
  auto log = logger("node");
  auto ctx = std::make_shared<node_context>();
  ctx->started_unix_ms = unix_now_ms();
  ctx->id = node_id;
  ctx->role = role;
  ctx->name = cfg.get_string("node.name").empty() ? default_node_name(role, node_id)
                                                  : cfg.get_string("node.name");
  ctx->cfg = cfg;
  ctx->cp = cp;
  ctx->coord_host = host;
  ctx->coord_port = port;
  auto j = args.make_job(cfg, role);
  if (!j) {
    log->error("job: {}", j.err().to_string());
    return 2;
  }
  ctx->running_job = std::move(*j);
  auto z = zmq::make_plane_context(cfg);
  if (!z) {
    log->error("{}", z.err().to_string());
    return 2;
  }
  ctx->zmq = *z;
  log->info("ZeroMQ planes: {}", ctx->zmq->encrypted()
                                     ? "CURVE (keys derived from node.plane_secret_file)"
                                     : "plain (this node listens on loopback only)");
  log->info("control plane: {}", cp.tls ? "TLS (the cluster CA's node.tls_* files)"
                                        : "plain CAF (this node listens on loopback only)");
  std::string bind_ep = "tcp://" + cfg.get_string("node.host") + ":*";
  if (role == node_role::buffer) {
    auto so = ledger::shard_options::from_config(cfg, ctx->name);
    auto po = ledger::sample_plane_options::from_config(cfg);
    if (!so || !po) {
      log->error("{}", (!so ? so.err() : po.err()).to_string());
      return 2;
    }
    auto svc = ledger::shard_service::bind(ctx->zmq, bind_ep, *so, *po);
    if (!svc) {
      log->error("shard: {}", svc.err().to_string());
      return 2;
    }
    auto ep = advertised_endpoint((*svc)->endpoint());
    if (!ep) {
      log->error("shard: {}", ep.err().to_string());
      return 2;
    }
    ctx->endpoint = *ep;
    ctx->shard = std::move(*svc);
  } else if (role == node_role::reward) {
    auto pull = ledger::reward_pull::bind(ctx->zmq, bind_ep);
    if (!pull) {
      log->error("reward: {}", pull.err().to_string());
      return 2;
    }
    auto ep = advertised_endpoint((*pull)->endpoint());
    if (!ep) {
      log->error("reward: {}", ep.err().to_string());
      return 2;
    }
    ctx->endpoint = *ep;
    ctx->pull = std::move(*pull);
  } else if (role == node_role::env) {
    auto server = env::env_server::bind(ctx->zmq, bind_ep);
    if (!server) {
      log->error("env: {}", server.err().to_string());
      return 2;
    }
    ctx->endpoint = (*server)->endpoint();
    ctx->env = std::move(*server);
  } else if (role == node_role::weights) {
    auto cache = std::make_shared<weights::version_cache>(
        static_cast<uint64_t>(cfg.get_int("weights.cache_versions")),
        static_cast<uint64_t>(cfg.get_int("weights.cache_bytes")));
    auto server = weights::cache_server::bind(
        ctx->zmq, bind_ep, cache, static_cast<uint64_t>(cfg.get_int("weights.chunk_bytes")));
    if (!server) {
      log->error("weights: {}", server.err().to_string());
      return 2;
    }
    auto ep = advertised_endpoint((*server)->endpoint());
    if (!ep) {
      log->error("weights: {}", ep.err().to_string());
      return 2;
    }
    ctx->endpoint = *ep;
    (*server)->enable_same_host_shm(cfg.get_bool("weights.same_host_shm"));
    // Fabric puts are taken whatever this node's weights.shard_push (the trainer's key):
    // the transport opens only at the first put_begin.
    (*server)->enable_fabric_puts(fabric::transport_options::from_config(cfg),
                                  cfg.get_int("weights.request_timeout_ms") * 5);
    ctx->weights_server = std::move(*server);
  }
  if (role == node_role::rollout && cfg.get_bool("weights.fanout") &&
      cfg.get_bool("weights.from_cache")) {
    // Fan-out (weights/FANOUT.md): the node serves what it holds; its endpoint is where.
    auto server =
        weights::peer_server::start(ctx->zmq, bind_ep, kPeerVersionsHeld,
                                    static_cast<uint64_t>(cfg.get_int("weights.cache_bytes")));
    auto ep =
        server ? advertised_endpoint((*server)->endpoint()) : result<std::string>(server.err());
    if (!ep) {
      log->error("rollout peer server: {}", ep.err().to_string());
      return 2;
    }
    ctx->endpoint = *ep;
    ctx->peer_server = std::move(*server);
  }
  if (role == node_role::rollout || role == node_role::trainer || role == node_role::weights) {
    ctx->weight_caches = std::make_shared<weights::cache_directory>(
        ctx->zmq, role == node_role::weights ? ctx->endpoint : std::string());
    if (ctx->peer_server)
      ctx->weight_caches->serve_peers(ctx->peer_server, ctx->endpoint,
                                      static_cast<int>(cfg.get_int("weights.fanout_degree")));
    ctx->running_job->use_weight_caches(ctx->weight_caches);
  }
  auto exit_code = std::make_shared<std::atomic<int>>(0);
  int code = 0;
  {
    node_caf_config ccfg(cp);
    caf::actor_system sys{ccfg};
    // Only the control threads: the role's bulk work (generation, training) stays at the
    // default priority, below them.
    prioritize_caf_io_threads(sys, static_cast<int>(cfg.get_int("node.control_nice")));
    auto agent = spawn_node_agent(sys, ctx, exit_code);
    int64_t grace = cfg.get_int("actors.sigterm_grace_ms");
    relay.set([agent, ctx, grace](int sig) {
      auto n = make_notice(ctx->id, messages::interruption_source::sigterm, unix_now_ms() + grace,
                           sig == SIGTERM ? "SIGTERM" : "SIGINT");
      caf::anon_send(agent, notice_atom::value, messages::encode(n));
    });
    std::unique_ptr<imds_poller> imds;
    if (cfg.get_bool("imds.enabled"))
      imds = std::make_unique<imds_poller>(
          imds_options::from_config(cfg), [agent, ctx](const messages::interruption_notice& n) {
            auto m = n;
            m.node = ctx->id;
            caf::anon_send(agent, notice_atom::value, messages::encode(m));
          });
    wait_for(sys, agent);
    ctx->stopping = true;
    ctx->coordinator_askers.close();  // its kept scoped actors end while the system runs
    code = exit_code->load();
    // The node owes nobody anything now (drained and deregistered, or told to stop). Teardown
    // takes milliseconds, but a drained rollout node was once seen in CI never to exit (cause
    // not found): bound it, so a pod cannot outlive its Spot deadline on a library hang.
    std::thread([code, name = ctx->name] {
      std::this_thread::sleep_for(std::chrono::seconds(5));
      auto log = logger("node");
      log->error(
          "node {} still tearing down 5 s after it finished: exiting with {} (its /dev/shm "
          "regions removed first: the exit skips the fabric's own clean-up)",
          name, code);
      remove_shm_regions_of(::getpid(), "node");
      log->flush();
      std::_Exit(code);
    }).detach();
    relay.set([](int) {});
    imds.reset();
  }
  // Every actor is done with the context: a cache's same-host copy of a version (a memfd,
  // weights/shm_copy.h) is freed now, not whenever the last reference to ctx goes.
  ctx->weights_server.reset();
  ctx->peer_server.reset();
  // A trainer's step and rank pool are not freed: the pool's rank threads and the group link
  // run on (the link holds the context), and freeing them under those threads crashed
  // trainer-0 and trainer-1 at every exit (SIGSEGV in scoped_actor's clean-up, in
  // actor_system::render, in a rank thread's bootstrap). What they would leave is their
  // fabric endpoints' /dev/shm regions (libfabric's shm provider unlinks them only on close):
  // trainer-0 left two 16 MiB regions at every exit. They are named after this process, so
  // the node removes them by name; the mappings stay valid until the process ends.
  if (ctx->trainer_state || ctx->trainer_rank_pool) remove_shm_regions_of(::getpid(), "node");
  log->info("node {} exits with {}", ctx->name, code);
  return code;
}

}  // namespace

int run_node(const node_args& args) {
  auto role = parse_role(args.role);
  if (!role) {
    std::cerr << "moerl node: " << role.err().message << "\n";
    return 2;
  }
  if (!args.make_job) {  // a bug in the caller, not bad input: every caller passes job::make_job
    std::cerr << "moerl node: no job factory given (node_args.make_job)\n";
    return 2;
  }
  auto hp = parse_host_port(args.join);
  if (!hp) {
    std::cerr << "moerl node: --join: " << hp.err().message << "\n";
    return 2;
  }
  auto cfg = config::load(args.config_file, args.overrides);
  if (!cfg) {
    std::cerr << "moerl node: invalid configuration: " << cfg.err().message << "\n";
    return 2;
  }
  auto cp = control_plane_options::from_config(*cfg);
  if (!cp) {
    std::cerr << "moerl node: " << cp.err().message << "\n";
    // Off loopback, name every missing credential at once, not one per attempt.
    if (auto z = zmq::make_plane_context(*cfg); !z)
      std::cerr << "moerl node: " << z.err().message << "\n";
    return 2;
  }
  if (auto r = cfg->get_int("actors.work_rounds"); r < 1 || r > 4096) {
    std::cerr << "moerl node: actors.work_rounds must be in 1..4096, got " << r << "\n";
    return 2;
  }
  // Our SIGTERM/SIGINT handler, before the actor system starts (see signal_watch.h).
  signal_relay relay;
  signal_watch watch([&relay](int sig) { relay.deliver(sig); });
  std::string id = make_node_id();
  init_logging(short_node_id(id), args.role, cfg->get_string("log.level"));
  if (*role == node_role::coordinator)
    return run_coordinator(*cfg, *cp, relay, hp->first, hp->second, id);
  return run_member(args, *role, *cfg, *cp, relay, hp->first, hp->second, id);
}

}  // namespace moerl::actors
