// Sharded publication of policy versions by a trainer group across processes (issue 27;
// job/sharded_publication.h): 2 and 4 forked member processes with a ~64 MiB model and one
// checkpoint cache in its own process. Each member pushes its own rank's parameter share as
// shard k of the version and reports only its size, sha256 and cache in the step's answer
// round; member 0 builds the manifest once every shard is held. Checked: the cache holds every
// member's shard; the coordinator's bytes per version stay under 64 KiB; a reader fetching the
// shards and assembling them gets exactly the bytes of the whole version member 0 would have
// published (bitwise, and its content hash); a shard corrupted on its way to the cache is
// refused, and a shard no cache took keeps the version unannounced and unreadable. Once more
// with weights.shard_push=fabric (weights/PROTOCOL.md "Fabric puts"): each member writes its
// shard into the cache process's landing region, and a shard that went by ZeroMQ instead
// fails the member's push.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/shm_leftovers.h"
#include "fabric/bootstrap.h"
#include "job/ep_trainer.h"
#include "job/group_bootstrap.h"
#include "job/param_slicing.h"
#include "job/sharded_publication.h"
#include "store/digest.h"
#include "tests/job/ep_fixture.h"
#include "weights/cache_client.h"
#include "weights/cache_server.h"
#include "weights/fabric_push.h"
#include "weights/version_cache.h"
#include "weights/version_reader.h"
#include "weights/wire.h"

namespace moerl::job {
namespace {

constexpr uint64_t kChunk = 1 << 20;
constexpr int kTimeoutMs = 20000;

// A checkpoint cache in its own process (forked before the members, while this process has
// no other thread), serving until killed; its endpoint comes back through a pipe. `fabric`:
// it takes fabric puts too (the members' fabric.* keys: shm on this host).
struct cache_process {
  pid_t pid = -1;
  std::string endpoint;
  ~cache_process() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      // A fabric cache's endpoint left its libfabric shm region behind (16 MiB a run).
      remove_shm_regions_of(pid, "sharded_publication_test");
    }
  }
};

void start_cache(cache_process& out, bool fabric) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  out.pid = ::fork();
  ASSERT_GE(out.pid, 0);
  if (out.pid == 0) {
    ::close(fds[0]);
    auto ctx = zmq::zmq_context::create();
    auto cache = std::make_shared<weights::version_cache>(4, uint64_t(1) << 30);
    auto server = ctx ? weights::cache_server::bind(*ctx, "tcp://127.0.0.1:*", cache, kChunk)
                      : result<std::unique_ptr<weights::cache_server>>(ctx.err());
    const std::string ep = server ? (*server)->endpoint() : std::string();
    if (::write(fds[1], ep.data(), ep.size()) != ssize_t(ep.size())) ::_exit(2);
    ::close(fds[1]);
    if (!server) ::_exit(1);
    if (fabric)
      (*server)->enable_fabric_puts(fabric::transport_options::from_config(testing::node_config()),
                                    kTimeoutMs);
    for (;;)
      if (!(*server)->poll(100)) ::_exit(3);
  }
  ::close(fds[1]);
  char buf[256];
  const ssize_t n = ::read(fds[0], buf, sizeof buf);
  ::close(fds[0]);
  ASSERT_GT(n, 0) << "the cache process did not bind";
  out.endpoint.assign(buf, size_t(n));
}

enum class fault { none, corrupt_shard, no_cache };

// What happens to the last member's shard of each version (member 0 drives versions 1..3).
fault fault_of(uint64_t version) {
  return version == 2 ? fault::corrupt_shard : version == 3 ? fault::no_cache : fault::none;
}

// A member's pusher of version v's shards: to the cache, or (the faults) with its bytes
// changed after they were hashed, or to a cache that does not exist. `fabric` (made from
// weights.shard_push, null for zmq): a shard that reached the cache but not through a fabric
// put (the pusher fell back to ZeroMQ) is a failed push.
shard_pusher pusher(std::shared_ptr<zmq::zmq_context> ctx, const std::string& cache,
                    bool last_member, std::shared_ptr<weights::fabric_pusher> fabric) {
  return [ctx, cache, last_member, fabric](uint64_t v, const std::string& bytes,
                                           const std::string& sha,
                                           const weights::shard_tag& tag) -> result<std::string> {
    const fault f = last_member ? fault_of(v) : fault::none;
    if (f == fault::corrupt_shard) {
      std::string bad = bytes;
      bad[bad.size() / 2] ^= 0x40;
      weights::cache_connections to(ctx, kTimeoutMs);
      return weights::push_to_a_cache(to, {cache}, v, bad, sha, kChunk, tag, fabric.get());
    }
    // No cache answers there: 500 ms is enough to give up. The real one gets the full
    // timeout (its first put_begin opens its fabric transport, slow on a loaded host).
    const bool dead = f == fault::no_cache;
    const uint64_t fabric_puts = fabric ? fabric->num_pushed() : 0;
    weights::cache_connections to(ctx, dead ? 500 : kTimeoutMs);
    auto held = weights::push_to_a_cache(to, {dead ? "tcp://127.0.0.1:1" : cache}, v, bytes, sha,
                                         kChunk, tag, fabric.get());
    if (held && fabric && fabric->num_pushed() != fabric_puts + 1)
      return error(errc::internal, "shard " + std::to_string(tag.shard) + " of version " +
                                       std::to_string(v) +
                                       " reached the cache by ZeroMQ, not by a fabric put");
    return held;
  };
}

// The members' fabric pusher for weights.shard_push = `how` (null for zmq), as a node makes it.
result<std::shared_ptr<weights::fabric_pusher>> fabric_pusher_for(const std::string& how) {
  config cfg = testing::node_config();
  if (auto st = cfg.set("weights.shard_push", how, "test"); !st) return st.err();
  return weights::fabric_pusher_from_config(cfg);
}

// The reader side of a rollout node: every shard from the cache, assembled in the full layout.
result<weights::fetched_version> read_version(std::shared_ptr<zmq::zmq_context> ctx,
                                              const std::string& cache, uint64_t v,
                                              const policy::param_layout& full) {
  weights::version_reader reader(ctx, kTimeoutMs);
  reader.set_assembler([&](const std::vector<weights::fetched_shard>& s, const std::string& h) {
    return assemble_shards(full, s, h);
  });
  return reader.fetch(v, {cache}, nullptr);
}

// Member 0's checks, one exit code each (the test names them).
int drive(ep_trainer& t, int num_members, std::shared_ptr<zmq::zmq_context> ctx,
          const std::string& cache, const std::vector<testing::training_batch>& batches,
          const std::string& shard_push) {
  auto fabric = fabric_pusher_for(shard_push);
  if (!fabric) return 29;
  auto push = pusher(ctx, cache, num_members == 1, *fabric);
  auto probe = weights::cache_client::connect(ctx, cache, kTimeoutMs);
  if (!probe) return 30;
  for (uint64_t v = 1; v <= batches.size(); ++v) {
    if (!t.step(batches[v - 1].samples, batches[v - 1].advantages, v).ok()) return 31;
    // The whole version member 0 published before sharding, and its content hash.
    auto whole = t.serialize();
    if (!whole) return 32;
    const std::string hash = policy::content_hash(*whole);
    auto shares = t.own_shares();
    if (!shares || shares->size() != 1 || (*shares)[0].first != 0) return 33;
    auto reports = push_shards(push, v, t.full_layout(), *shares, uint32_t(num_members), hash);
    for (const auto& a : t.member_answers())
      for (const auto& j : a.value("weights", nlohmann::json::array())) {
        auto r = shard_report_from_json(j);
        if (!r) return 34;
        reports.push_back(*r);
      }
    if (reports.size() != size_t(num_members)) return 35;
    auto parts = sharded_manifest_parts(reports, uint32_t(num_members), "w/v" + std::to_string(v));
    std::fprintf(stderr,
                 "members %d, version %llu: coordinator bytes %llu, whole version %zu bytes, "
                 "shard 0 %llu bytes, manifest %s\n",
                 num_members, (unsigned long long)v, (unsigned long long)t.coordinator_bytes(),
                 whole->size(), (unsigned long long)reports[0].bytes,
                 parts ? "complete" : parts.err().message.c_str());
    // Control messages only, whatever the model size: the shares went to the cache directly.
    if (t.coordinator_bytes() >= 64 * 1024) return 36;
    auto read = read_version(ctx, cache, v, t.full_layout());
    const uint32_t last = uint32_t(num_members - 1);
    auto last_meta = (*probe)->call(weights::wire::kMeta, {{"version", v}, {"shard", last}});
    if (fault_of(v) == fault::none) {
      if (!parts || parts->size() != size_t(num_members)) return 37;
      uint64_t sum = 0;
      for (uint32_t k = 0; k < uint32_t(num_members); ++k) {
        auto m = (*probe)->call(weights::wire::kMeta, {{"version", v}, {"shard", k}});
        if (!m || m->header.value("num_shards", 0u) != uint32_t(num_members)) return 38;
        if (m->header.value("content_hash", std::string()) != (*parts)[k].sha256) return 39;
        sum += (*parts)[k].bytes;
      }
      // Each shard is one member's share, the dense tensors in shard 0 only: together the
      // whole version's bytes plus a header per shard, nothing sent twice.
      if (sum < whole->size() || sum > whole->size() + 64 * 1024 ||
          reports[0].bytes > 2 * whole->size() / uint64_t(num_members))
        return 40;
      if (!read) {
        std::fprintf(stderr, "read: %s\n", read.err().to_string().c_str());
        return 41;
      }
      // Exactly what the whole publication was: bitwise, so its content hash too.
      if (*read->bytes != *whole || policy::content_hash(*read->bytes) != hash) return 42;
    } else {
      // The last member's shard is in no cache: no manifest (member 0 does not announce the
      // version through the caches) and no reader assembles it.
      if (parts || parts.err().code != errc::not_found) return 43;
      if (parts.err().message.find("shard(s) " + std::to_string(last)) == std::string::npos)
        return 44;
      if (fault_of(v) == fault::corrupt_shard &&
          parts.err().message.find("does not match its content hash") == std::string::npos)
        return 45;
      if (last_meta || last_meta.err().code != errc::not_found) return 46;
      if (read) return 47;
    }
  }
  t.stop_members();
  return 0;
}

// shard_push: weights.shard_push of the members (zmq or fabric).
void run_group(int num_members, const std::string& shard_push = "zmq") {
  std::vector<testing::training_batch> batches;
  for (uint64_t seed : {11, 12, 13})
    batches.push_back(testing::make_training_batch(testing::model_of_64_mib(), seed));
  cache_process cache;
  start_cache(cache, shard_push == "fabric");
  ASSERT_FALSE(cache.endpoint.empty());
  auto rep = fabric::launch_processes(
      num_members,
      [&](fabric::bootstrap& boot) -> int {
        auto ctx = zmq::zmq_context::create();
        if (!ctx) return 20;
        auto span = launched_process_span(boot);
        policy::grpo_config grpo;
        grpo.group_size = 4;
        policy::adam_config adam;
        adam.learning_rate = 1e-2;
        auto made = ep_trainer::create(testing::node_config(), testing::model_of_64_mib(), grpo,
                                       adam, 1.0f, num_members, 32, &span);
        if (!made) return 21;
        ep_trainer& t = **made;
        if (boot.rank() == 0)
          return drive(t, num_members, *ctx, cache.endpoint, batches, shard_push);
        auto fabric = fabric_pusher_for(shard_push);
        if (!fabric) return 22;
        auto push = pusher(*ctx, cache.endpoint, boot.rank() == num_members - 1, *fabric);
        ep_member_hooks hooks;
        hooks.after_step = [&](uint64_t v) -> result<nlohmann::json> {
          auto shares = t.own_shares();
          if (!shares) return shares.err();
          nlohmann::json list = nlohmann::json::array();
          for (const auto& r :
               push_shards(push, v, t.full_layout(), *shares, uint32_t(num_members), ""))
            list.push_back(r.to_json());
          return nlohmann::json{{"weights", list}};
        };
        return t.serve(hooks).ok() ? 0 : 3;
      },
      280000);
  ASSERT_TRUE(rep.ok()) << rep.err().to_string();
  EXPECT_EQ(rep->exit_codes, std::vector<int>(size_t(num_members), 0));
}

TEST(sharded_publication, a_group_of_two_publishes_each_members_shard) { run_group(2); }

TEST(sharded_publication, a_group_of_four_publishes_each_members_shard) { run_group(4); }

// The member->cache fabric path under a real trainer group: every shard lands in the cache's
// region (shm on this host), the faults as above (a corrupt shard is refused at put_commit,
// then again by the ZeroMQ put it falls back to).
TEST(sharded_publication, a_group_of_two_pushes_its_shards_over_the_fabric) {
  run_group(2, "fabric");
}

// The pieces without processes: the manifest needs every shard, and assembly is exact and
// checked against the version's hash (a corrupted shard's parameters are never handed out).
TEST(sharded_publication, the_manifest_names_every_shard_or_what_is_missing) {
  std::vector<shard_report> reports{{0, 10, std::string(64, 'a'), "tcp://c:1", ""},
                                    {2, 12, std::string(64, 'c'), "tcp://c:2", ""}};
  auto missing = sharded_manifest_parts(reports, 3, "p/weights/v4");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.err().code, errc::not_found);
  EXPECT_NE(missing.err().message.find("1 (not reported)"), std::string::npos)
      << missing.err().message;
  reports.push_back({1, 11, std::string(64, 'b'), "", "cache refused it"});
  auto refused = sharded_manifest_parts(reports, 3, "p/weights/v4");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.err().message.find("1 (cache refused it)"), std::string::npos)
      << refused.err().message;
  reports.back() = {1, 11, std::string(64, 'b'), "tcp://c:1", ""};
  auto parts = sharded_manifest_parts(reports, 3, "p/weights/v4");
  ASSERT_TRUE(parts) << parts.err().to_string();
  ASSERT_EQ(parts->size(), 3u);
  EXPECT_EQ((*parts)[1].name, "p/weights/v4#shard-1");
  EXPECT_EQ((*parts)[1].offset, 1u);
  EXPECT_EQ((*parts)[1].bytes, 11u);
  EXPECT_EQ((*parts)[2].sha256, std::string(64, 'c'));
  auto round = shard_report_from_json(reports[0].to_json());
  ASSERT_TRUE(round);
  EXPECT_EQ(round->cache, "tcp://c:1");
  EXPECT_FALSE(shard_report_from_json({{"shard", 1}}));
}

TEST(sharded_publication, shards_assemble_to_exactly_the_whole_version) {
  auto model = testing::small_model(5);
  model.num_experts = 4;
  auto local = policy::make_local_expert_exchange();
  auto full = policy::moe_policy::create(model, *local);
  ASSERT_TRUE(full);
  testing::perturb(**full, 3);
  const std::string whole = (*full)->serialize();
  // A rank's layout: the expert tensors (policy/model.cpp's moe.w_*, experts leading) hold a
  // quarter of the experts; the shares of 4 ranks in it are the shards.
  std::vector<weights::fetched_shard> shards;
  policy::param_layout rank_layout;
  for (const auto& t : (*full)->layout().tensors()) {
    auto dims = t.dims;
    if (t.name.find("moe.w_") != std::string::npos) dims[0] /= 4;
    rank_layout.add(t.name, dims);
  }
  for (int r = 0; r < 4; ++r) {
    auto share = slice_params((*full)->layout(), (*full)->params(), rank_layout, r, 4);
    ASSERT_TRUE(share) << share.err().to_string();
    auto bytes =
        publication_shard((*full)->layout(), r, policy::serialize_params(rank_layout, *share));
    ASSERT_TRUE(bytes) << bytes.err().to_string();
    if (r > 0) {  // expert tensors only: 2 per layer
      policy::param_layout held;
      ASSERT_TRUE(policy::deserialize_params(*bytes, nullptr, &held));
      EXPECT_EQ(held.tensors().size(), size_t(2 * model.num_layers));
    }
    weights::fetched_shard s;
    s.shard = uint32_t(r);
    s.num_shards = 4;
    s.bytes = std::make_shared<const std::string>(std::move(*bytes));
    shards.push_back(std::move(s));
  }
  auto got = assemble_shards((*full)->layout(), shards, policy::content_hash(whole));
  ASSERT_TRUE(got) << got.err().to_string();
  EXPECT_EQ(*got, whole);
  // A shard whose parameters changed (its sha256 would have caught it in transit; here it is
  // past that check): the assembled version does not match the version's hash, refused. The
  // last tensor ("head") is dense, taken from shard 0.
  std::string bad = *shards[0].bytes;
  bad[bad.size() - 3] ^= 0x10;
  shards[0].bytes = std::make_shared<const std::string>(bad);
  auto refused = assemble_shards((*full)->layout(), shards, policy::content_hash(whole));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.err().code, errc::malformed_message);
  EXPECT_NE(refused.err().message.find("does not match its content hash"), std::string::npos);
  shards[0].bytes = shards[1].bytes;
  auto no_dense = assemble_shards((*full)->layout(), shards, "");  // shard 0 without dense
  EXPECT_FALSE(no_dense);
  shards.pop_back();
  EXPECT_FALSE(assemble_shards((*full)->layout(), shards, ""));  // 3 of 4 shards
}

}  // namespace
}  // namespace moerl::job
