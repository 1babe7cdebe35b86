#include "job/ep_policy_group.h"

#include <algorithm>

#include "fabric/bootstrap.h"
#include "fabric/collectives.h"
#include "job/fabric_expert_exchange.h"
#include "job/internal/ep_device_rank.h"
#include "job/param_slicing.h"
#include "job/rank_threads.h"

namespace moerl::job {

row_range rows_of_rank(int64_t n, int rank, int num_ranks) {
  // The first n % num_ranks ranks take one row more.
  const int64_t base = n / num_ranks, extra = n % num_ranks;
  row_range r;
  r.first = rank * base + std::min<int64_t>(rank, extra);
  r.count = base + (rank < extra ? 1 : 0);
  return r;
}

uint64_t rank_sampling_seed(uint64_t base, int rank) {
  uint64_t x = base + 0x9e3779b97f4a7c15ull * (uint64_t(rank) + 1);  // splitmix64 step
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct ep_policy_group::impl {
  policy::model_config model;
  fabric_exchange_options options;
  policy::param_layout full_layout, rank_layout;
  bool dense_collectives = false;
  bool on_device = false;  // job.device=cuda
  struct rank_state {
    std::unique_ptr<fabric_expert_exchange> exchange;
    std::unique_ptr<policy::moe_policy> policy;  // job.device=cpu
    std::unique_ptr<ep_device_rank> device;      // job.device=cuda
    std::unique_ptr<fabric::collective_group> dense;
    std::vector<float> init_params;  // the share initialised from policy.seed (version 0)
  };
  // A rank's share into its policy (host or device); sizes checked by the caller.
  status set_share(int rank, std::vector<float> params) {
    auto& rs = ranks[rank];
    if (rs.device) return rs.device->set_params(params);
    rs.policy->params() = std::move(params);
    return ok_status();
  }
  // A copy of a rank's share, on its own thread (a device rank's device is set there).
  result<std::vector<float>> share_of(int rank) {
    if (!on_device) return ranks[rank].policy->params();
    std::vector<float> out;
    auto st = threads->run([&](int r) -> status {
      if (r != rank) return ok_status();
      auto p = ranks[r].device->params_host();
      if (!p) return p.err();
      out = std::move(*p);
      return ok_status();
    });
    if (!st) return st.err();
    return out;
  }
  std::vector<rank_state> ranks;  // [global rank]; only the local ones are set up
  int first_rank = 0, num_local = 0;
  std::unique_ptr<rank_threads> threads;
};

ep_policy_group::ep_policy_group(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
// The rank threads go first: their teardown destroys the exchanges after a barrier.
ep_policy_group::~ep_policy_group() { impl_->threads.reset(); }

result<std::unique_ptr<ep_policy_group>> ep_policy_group::create(const config& cfg,
                                                                 const policy::model_config& model,
                                                                 const ep_group_shape& shape) {
  if (shape.num_ranks < 1)
    return error{errc::invalid_config,
                 "expert-parallel ranks must be >= 1, got " + std::to_string(shape.num_ranks)};
  if (model.num_experts % shape.num_ranks != 0)
    return error{errc::invalid_config, "policy.num_experts " + std::to_string(model.num_experts) +
                                           " does not split over " +
                                           std::to_string(shape.num_ranks) +
                                           " expert-parallel ranks"};
  auto opt =
      fabric_exchange_options_from_config(cfg, shape.max_train_tokens, shape.max_decode_rows);
  if (!opt) return opt.err();
  // Ranks are threads of this process: shared memory unless the config names a provider.
  if (opt->transport.provider == "auto") opt->transport.provider = "shm";
  // The shape and bounds follow `model` (which may differ from cfg's policy.* keys in tests).
  opt->num_experts = model.num_experts;
  opt->hidden = model.d_model;
  opt->top_k = model.top_k;

  auto p = std::make_unique<impl>();
  p->model = model;
  p->options = *opt;
  p->ranks.resize(shape.num_ranks);
  p->dense_collectives = shape.dense_collectives;
  p->on_device = cfg.get_string("job.device") == "cuda";
  p->first_rank = shape.make_bootstrap ? shape.first_rank : 0;
  p->num_local =
      shape.make_bootstrap && shape.num_local_ranks > 0 ? shape.num_local_ranks : shape.num_ranks;
  if (p->first_rank < 0 || p->first_rank + p->num_local > shape.num_ranks)
    return error{errc::invalid_config, "expert-parallel ranks " + std::to_string(p->first_rank) +
                                           ".." + std::to_string(p->first_rank + p->num_local - 1) +
                                           " are outside the group of " +
                                           std::to_string(shape.num_ranks)};
  // A trainer never decodes: no low-latency group (one endpoint fewer per rank).
  if (shape.max_decode_rows == 0) p->options.low_latency_group = false;
  p->options.transport.abort = shape.abort;
  {  // The full layout (every expert), from a single-rank policy's.
    auto local = policy::make_local_expert_exchange();
    auto full = policy::moe_policy::create(model, *local);
    if (!full) return full.err();
    p->full_layout = (*full)->layout();
  }
  impl* raw = p.get();
  auto setup = [raw](fabric::bootstrap& b) -> status {
    auto& rs = raw->ranks[b.rank()];
    auto ex = make_fabric_expert_exchange(b, raw->options);
    if (!ex) return ex.err();
    rs.exchange = std::move(*ex);
    if (raw->on_device) {
      // Selects the rank's device on this thread first: the NCCL communicator below is
      // created on the current device.
      auto dev = ep_device_rank::create(raw->model, *rs.exchange, b.rank());
      if (!dev) return dev.err();
      rs.device = std::move(*dev);
      auto init = rs.device->params_host();
      if (!init) return init.err();
      rs.init_params = std::move(*init);
    } else {
      auto pol = policy::moe_policy::create(raw->model, *rs.exchange);
      if (!pol) return pol.err();
      rs.policy = std::move(*pol);
      rs.init_params = rs.policy->params();
    }
    if (raw->dense_collectives) {
      fabric::collective_config cc;
      cc.op_timeout_ms = raw->options.op_timeout_ms;
      // NCCL only for device buffers: a host job opens no communicator (and needs no device).
      cc.use_nccl = raw->on_device;
      auto d =
          fabric::collective_group::create(raw->options.transport, b, fabric::all_members(b), cc);
      if (!d) return d.err();
      rs.dense = std::move(*d);
    }
    return ok_status();
  };
  auto teardown = [raw](int rank) {
    raw->ranks[rank].dense.reset();
    raw->ranks[rank].device.reset();
    raw->ranks[rank].policy.reset();
    raw->ranks[rank].exchange.reset();
  };
  auto threads =
      rank_threads::start(p->num_local, setup, teardown, p->first_rank, shape.make_bootstrap);
  if (!threads) return error{threads.err().code, "expert-parallel group: " + threads.err().message};
  p->threads = std::move(*threads);
  if (!p->on_device) {
    p->rank_layout = p->ranks[p->first_rank].policy->layout();
  } else {  // the device policy's host mirror has this layout too (model_cuda.h)
    auto host = policy::moe_policy::create(p->model, *p->ranks[p->first_rank].exchange);
    if (!host) return host.err();
    p->rank_layout = (*host)->layout();
  }
  return std::unique_ptr<ep_policy_group>(new ep_policy_group(std::move(p)));
}

int ep_policy_group::num_ranks() const { return static_cast<int>(impl_->ranks.size()); }
bool ep_policy_group::broken() const { return impl_->threads->broken(); }
const policy::param_layout& ep_policy_group::full_layout() const { return impl_->full_layout; }

status ep_policy_group::load(const std::string& bytes) {
  auto full = policy::deserialize_params(bytes, &impl_->full_layout);
  if (!full) return full.err();
  const int n = num_ranks();
  // Slicing touches only the rank's own policy, so the ranks do it in parallel.
  return impl_->threads->run([&](int rank) -> status {
    auto share = slice_params(impl_->full_layout, *full, impl_->rank_layout, rank, n);
    if (!share) return share.err();
    return impl_->set_share(rank, std::move(*share));
  });
}

status ep_policy_group::reset_to_init() {
  return impl_->threads->run(
      [&](int rank) -> status { return impl_->set_share(rank, impl_->ranks[rank].init_params); });
}

result<std::vector<policy::generation>> ep_policy_group::generate_parts(
    const std::vector<policy::token_id>& prompt, int num_rows, int max_new, float temperature,
    uint64_t base_seed) {
  return generate_parts(std::vector<std::vector<policy::token_id>>(
                            static_cast<size_t>(std::max(num_rows, 0)), prompt),
                        max_new, temperature, base_seed);
}

result<std::vector<policy::generation>> ep_policy_group::generate_parts(
    const std::vector<std::vector<policy::token_id>>& row_prompts, int max_new, float temperature,
    uint64_t base_seed) {
  const int n = num_ranks();
  const auto num_rows = static_cast<int64_t>(row_prompts.size());
  if (num_rows < n)
    return error{errc::invalid_argument,
                 std::to_string(num_rows) + " rows cannot keep " + std::to_string(n) +
                     " expert-parallel ranks busy (each needs at least one)"};
  for (const auto& p : row_prompts)
    if (p.size() != row_prompts[0].size())
      return error{errc::invalid_argument, "rows of one generation must share a prompt length (" +
                                               std::to_string(row_prompts[0].size()) + " and " +
                                               std::to_string(p.size()) + ")"};
  std::vector<policy::generation> parts(n);
  auto st = impl_->threads->run([&](int rank) -> status {
    const row_range rr = rows_of_rank(num_rows, rank, n);
    std::vector<std::vector<policy::token_id>> rows(row_prompts.begin() + rr.first,
                                                    row_prompts.begin() + rr.first + rr.count);
    std::mt19937_64 rng(rank_sampling_seed(base_seed, rank));
    auto& rs = impl_->ranks[rank];
    auto g = rs.device ? rs.device->generate(rows, max_new, temperature, rng)
                       : rs.policy->generate(rows, max_new, temperature, rng);
    if (!g) return g.err();
    parts[rank] = std::move(*g);
    return ok_status();
  });
  if (!st) return st.err();
  return parts;
}

policy::generation rows_in_order(std::vector<policy::generation>&& parts) {
  policy::generation out;
  for (auto& p : parts) {
    for (auto& c : p.completions) out.completions.push_back(std::move(c));
    for (auto& l : p.logprobs) out.logprobs.push_back(std::move(l));
  }
  return out;
}

result<policy::generation> ep_policy_group::generate(const std::vector<policy::token_id>& prompt,
                                                     int num_rows, int max_new, float temperature,
                                                     uint64_t base_seed) {
  auto parts = generate_parts(prompt, num_rows, max_new, temperature, base_seed);
  if (!parts) return parts.err();
  return rows_in_order(std::move(*parts));
}

result<policy::generation> ep_policy_group::generate(
    const std::vector<std::vector<policy::token_id>>& row_prompts, int max_new, float temperature,
    uint64_t base_seed) {
  auto parts = generate_parts(row_prompts, max_new, temperature, base_seed);
  if (!parts) return parts.err();
  return rows_in_order(std::move(*parts));
}

status ep_policy_group::run_on_ranks(const std::function<status(rank_context&)>& fn) {
  return impl_->threads->run([&](int rank) {
    rank_context ctx;
    ctx.rank = rank;
    ctx.policy = impl_->ranks[rank].policy.get();
    ctx.device = impl_->ranks[rank].device.get();
    ctx.dense = impl_->ranks[rank].dense.get();
    return fn(ctx);
  });
}

result<std::vector<std::string>> ep_policy_group::members_allgather(const std::string& mine,
                                                                    int num_members) {
  // A contribution is an answer or a generate's rows: bytes to megabytes. A size past this is
  // a broken peer, not a contribution.
  constexpr uint64_t kMaxBytes = uint64_t(1) << 30;
  const int ranks_per_member = num_local_ranks();
  std::vector<std::string> out(static_cast<size_t>(num_members));
  auto st = run_on_ranks([&](rank_context& ctx) -> status {
    if (!ctx.dense)
      return error{errc::internal, "members_allgather needs the group's dense collectives"};
    for (int m = 0; m < num_members; ++m) {
      const int root = m * ranks_per_member;
      uint64_t size = ctx.rank == root ? mine.size() : 0;
      if (auto b = ctx.dense->broadcast(&size, sizeof size, root); !b) return b;
      if (size > kMaxBytes)
        return error{errc::malformed_message,
                     "member " + std::to_string(m) + " sent " + std::to_string(size) + " bytes"};
      std::string bytes = ctx.rank == root ? mine : std::string(size, '\0');
      if (auto b = ctx.dense->broadcast(bytes.data(), bytes.size(), root); !b) return b;
      if (ctx.rank == first_local_rank()) out[static_cast<size_t>(m)] = std::move(bytes);
    }
    return ok_status();
  });
  if (!st) return st.err();
  return out;
}

const policy::param_layout& ep_policy_group::rank_layout() const { return impl_->rank_layout; }

int ep_policy_group::first_local_rank() const { return impl_->first_rank; }
int ep_policy_group::num_local_ranks() const { return impl_->num_local; }
const fabric::transport_description& ep_policy_group::expert_plane(int rank) const {
  return impl_->ranks[rank].exchange->describe();
}
bool ep_policy_group::on_device() const { return impl_->on_device; }
result<std::vector<float>> ep_policy_group::share(int rank) const {
  if (rank < first_local_rank() || rank >= first_local_rank() + num_local_ranks())
    return error{errc::invalid_argument, "rank " + std::to_string(rank) + " is not local"};
  return impl_->share_of(rank);
}
status ep_policy_group::load_share(int rank, std::vector<float> params) {
  if (rank < first_local_rank() || rank >= first_local_rank() + num_local_ranks())
    return error{errc::invalid_argument, "rank " + std::to_string(rank) + " is not local"};
  const size_t want = impl_->rank_layout.num_floats();
  if (params.size() != want)
    return error{errc::malformed_message, "rank " + std::to_string(rank) + "'s share has " +
                                              std::to_string(params.size()) + " floats, not " +
                                              std::to_string(want)};
  if (!impl_->on_device) return impl_->set_share(rank, std::move(params));
  return impl_->threads->run(
      [&](int r) -> status { return r == rank ? impl_->set_share(r, params) : ok_status(); });
}

result<std::vector<float>> ep_policy_group::full_params() const {
  if (impl_->num_local != num_ranks())
    return error{errc::internal, "full_params: the group's ranks are not all in this process"};
  std::vector<std::vector<float>> shares;
  for (int r = 0; r < num_ranks(); ++r) {
    auto sh = impl_->share_of(r);
    if (!sh) return sh.err();
    shares.push_back(std::move(*sh));
  }
  return assemble_params(impl_->full_layout, impl_->rank_layout, shares);
}

}  // namespace moerl::job
