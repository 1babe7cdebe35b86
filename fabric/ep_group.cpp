// The shared EP group: configuration, buffers, bootstrap, the count exchange, the waits and
// the public entry points. What differs between modes is the mode's table of operations
// (fabric/internal/ep_group_impl.h), one file per mode: fabric/ep_mode_normal.cpp,
// fabric/ep_mode_low_latency.cpp, fabric/ep_mode_baseline.cpp.
#include "fabric/ep_group.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "common/config.h"
#include "fabric/internal/ep_group_impl.h"
#include "kernels/dispatch_layout.h"
#include "kernels/dtypes.h"

namespace moerl::fabric {

using detail::ep_group_impl;
using detail::ep_phase;
using proto::count_record;

const char* ep_mode_name(ep_mode m) {
  switch (m) {
    case ep_mode::normal: return "normal";
    case ep_mode::low_latency: return "ll";
    case ep_mode::baseline: return "baseline";
  }
  return "?";
}

const char* ep_memory_name(ep_memory m) {
  switch (m) {
    case ep_memory::host: return "host";
    case ep_memory::cuda: return "cuda";
    case ep_memory::host_split: return "host_split";
  }
  return "?";
}

result<ep_mode> parse_ep_mode(const std::string& name) {
  if (name == "normal") return ep_mode::normal;
  if (name == "ll" || name == "low_latency") return ep_mode::low_latency;
  if (name == "baseline") return ep_mode::baseline;
  return error{errc::invalid_argument, "unknown EP mode '" + name + "' (normal|ll|baseline)"};
}

size_t ep_dtype_size(ep_dtype d) { return d == ep_dtype::bf16 ? 2 : 4; }

void apply_config(const config& node_config, ep_config& cfg) {
  cfg.op_timeout_ms = node_config.get_int("fabric.op_timeout_ms");
}

// ---- the shared machinery --------------------------------------------------------------

namespace detail {

void ep_group_impl::start_output(std::vector<int64_t>& per_expert) {
  for (int j = 0; j < num_local_experts; ++j) per_expert[j + 1] += per_expert[j];
  const int64_t num_rows = per_expert[num_local_experts];
  output.seq = seq;
  output.expert_offset = per_expert;
  output.num_recv_rows = num_rows;
  output.expert_stride = expert_stride();
  // The shared output region (normal mode) and the split layout's output region are sized
  // for every row a step can bring; the block layout's rows are the caller's.
  if (!output_region.reg.ptr && !split() && !recv_rows)
    output_x[static_cast<size_t>(output_slot)].resize(
        static_cast<size_t>(std::max<int64_t>(num_rows, 1) * hidden_bytes));
  output.src_rank.assign(num_rows, 0);
  output.src_token.assign(num_rows, 0);
  output.src_k.assign(num_rows, 0);
  output_recv_pos.assign(num_rows, 0);
}

const dispatch_output* ep_group_impl::finish_output() {
  output.recv_x = output_rows();
  phase = ep_phase::dispatched;
  return &output;
}

error ep_group_impl::fail(error e) {
  if (!is_broken) {
    is_broken = true;
    broken = e;
  }
  return e;
}

status ep_group_impl::check_usable() const {
  if (is_broken)
    return error{broken.code, "EP group unusable after earlier error: " + broken.message};
  return {};
}

status ep_group_impl::progress() {
  imm_batch.clear();
  if (auto st = endpoint->progress(imm_batch); !st) return fail(st.err());
  for (uint32_t imm : imm_batch) {
    const uint32_t kind = proto::imm_kind_of(imm), src = proto::imm_src_of(imm);
    if (kind == proto::imm_reserved || src >= static_cast<uint32_t>(num_ranks) ||
        proto::imm_reserved_bits(imm) != 0)
      return fail(
          error{errc::malformed_message, "EP: unexpected immediate " + std::to_string(imm)});
    ++counter(proto::imm_step_of(imm), kind, static_cast<int>(src), proto::imm_forwarded_of(imm));
  }
  return {};
}

status ep_group_impl::wait_for(uint32_t kind, const std::vector<int64_t>& expected,
                               const char* what, uint32_t fwd) {
  for (;;) {
    bool done = endpoint->outstanding() == 0;
    for (int r = 0; r < num_ranks && done; ++r)
      if (counter(seq, kind, r, fwd) < expected[r]) done = false;
    if (done) break;
    if (auto st = progress(); !st) return st;
    // Ranks may outnumber cores (a dev box): give the CPU to the peer we wait for (on the
    // same-host path, sleep on our inbox's doorbell until a peer rings it).
    if (imm_batch.empty()) endpoint->idle_wait(std::min<int64_t>(1000000, deadline - now_ns()));
    if (abort && abort->load(std::memory_order_acquire))
      return fail(error{errc::peer_dead, std::string("EP step ") + std::to_string(seq) + ": " +
                                             what + " aborted (a member of the group was lost)"});
    if (now_ns() > deadline) {
      std::string missing;
      for (int r = 0; r < num_ranks; ++r)
        if (counter(seq, kind, r, fwd) < expected[r])
          missing += (missing.empty() ? "rank " : ", rank ") + std::to_string(r) + " (" +
                     std::to_string(counter(seq, kind, r, fwd)) + "/" +
                     std::to_string(expected[r]) + ")";
      return fail(error{errc::timeout,
                        std::string("EP step ") + std::to_string(seq) + ": " + what +
                            " incomplete after " + std::to_string(cfg.op_timeout_ms) +
                            " ms; missing from " + (missing.empty() ? "no rank" : missing) +
                            (endpoint->outstanding() ? "; own writes still outstanding" : "")});
    }
  }
  for (int r = 0; r < num_ranks; ++r) {
    if (counter(seq, kind, r, fwd) != expected[r])
      return fail(error{errc::malformed_message, std::string("EP: more ") + what +
                                                     " completions than announced from rank " +
                                                     std::to_string(r)});
    counter(seq, kind, r, fwd) = 0;
  }
  return {};
}

status ep_group_impl::write(int peer, const char* src, int64_t len, const remote_region& dst,
                            int64_t off, uint32_t kind, uint64_t& wire, uint64_t& writes,
                            uint32_t fwd) {
  const uint32_t imm = proto::make_imm(static_cast<proto::imm_kind>(kind), seq, rank, fwd);
  if (auto st = endpoint->write(peer, staging_or_ctrl(src), src, static_cast<size_t>(len), dst,
                                static_cast<uint64_t>(off), imm, deadline);
      !st)
    return fail(st.err());
  wire += static_cast<uint64_t>(len);
  ++writes;
  return {};
}

status ep_group_impl::notify(int peer, int64_t len, int64_t num_writes, uint32_t kind,
                             uint64_t& wire, uint64_t& writes, uint32_t fwd) {
  const uint32_t imm = proto::make_imm(static_cast<proto::imm_kind>(kind), seq, rank, fwd);
  if (auto st = endpoint->notify(peer, imm, num_writes, deadline); !st) return fail(st.err());
  wire += static_cast<uint64_t>(len);
  writes += static_cast<uint64_t>(num_writes);
  return {};
}

const local_region& ep_group_impl::staging_or_ctrl(const char* p) const {
  auto in = [p](const buffer& b) { return p >= b.data() && p < b.data() + b.reg.size; };
  if (in(ctrl_send)) return ctrl_send.reg;
  return payload_staging.reg.ptr && in(payload_staging) ? payload_staging.reg : staging.reg;
}

status ep_group_impl::write_chunked(int peer, const char* src, int64_t len,
                                    const remote_region& dst, int64_t off, uint32_t kind,
                                    uint64_t& wire, uint64_t& writes, uint32_t fwd) {
  const auto c = static_cast<int64_t>(cfg.chunk_bytes);
  for (int64_t done = 0; done < len; done += c)
    if (auto st = write(peer, src + done, std::min(c, len - done), dst, off + done, kind, wire,
                        writes, fwd);
        !st)
      return st;
  return {};
}

}  // namespace detail

// ---- creation -------------------------------------------------------------------------

namespace {

const detail::ep_mode_ops& mode_ops_of(ep_mode m) {
  switch (m) {
    case ep_mode::normal: return detail::normal_mode_ops;
    case ep_mode::low_latency: return detail::low_latency_mode_ops;
    case ep_mode::baseline: return detail::baseline_mode_ops;
  }
  return detail::normal_mode_ops;
}

result<detail::buffer> make_buffer(transport& t, int64_t size) {
  detail::buffer b;
  auto reg = t.allocate_region(static_cast<size_t>(std::max<int64_t>(size, 64)));
  if (!reg) return error{reg.err().code, "EP: " + reg.err().message};
  b.reg = *reg;
  return b;
}

status validate(const ep_config& c, int num_ranks) {
  auto bad = [](const std::string& m) { return error{errc::invalid_argument, "EP config: " + m}; };
  if (num_ranks < 1 || num_ranks > proto::max_ranks) return bad("group size must be 1..4096");
  if (c.num_experts < num_ranks || c.num_experts % num_ranks != 0)
    return bad("num_experts (" + std::to_string(c.num_experts) +
               ") must be a positive multiple of the group size (" + std::to_string(num_ranks) +
               ")");
  if (c.hidden < 1) return bad("hidden must be >= 1");
  if (c.topk < 1 || c.topk > c.num_experts) return bad("topk must be 1..num_experts");
  if (c.max_tokens_per_rank < 1) return bad("max_tokens_per_rank must be >= 1");
  if (c.chunk_bytes < 4096) return bad("chunk_bytes must be >= 4096");
  if (c.op_timeout_ms < 1) return bad("op_timeout_ms must be >= 1");
  if (c.rows_per_peer < 0) return bad("rows_per_peer must be >= 0");
  if (c.ll_entries_per_write < 1) return bad("ll_entries_per_write must be >= 1");
  if (c.ll_expert_stride < 0) return bad("ll_expert_stride must be >= 0");
  if (c.ll_expert_stride > 0 && c.mode != ep_mode::low_latency)
    return bad(std::string("ll_expert_stride is a low_latency option; mode is ") +
               ep_mode_name(c.mode));
  // Same-host peers read combine_buffer() rows through int32 positions (PROTOCOL.md).
  if (c.ll_expert_stride > 0 &&
      c.ll_expert_stride > std::numeric_limits<int32_t>::max() / (c.num_experts / num_ranks))
    return bad("ll_expert_stride (" + std::to_string(c.ll_expert_stride) +
               ") times the experts per rank must fit an int32 row number");
  if (c.ranks_per_node < 0 || (c.ranks_per_node > 0 && num_ranks % c.ranks_per_node != 0))
    return bad("ranks_per_node (" + std::to_string(c.ranks_per_node) +
               ") must divide the group size (" + std::to_string(num_ranks) + ")");
  if (c.output_slots < 1 || c.output_slots > 64) return bad("output_slots must be 1..64");
  if (c.output_slots > 1 && (c.mode != ep_mode::normal || c.memory != ep_memory::host))
    return bad(std::string("output_slots is a normal-mode option for host memory; mode is ") +
               ep_mode_name(c.mode) + ", memory " + ep_memory_name(c.memory));
  if (c.memory != ep_memory::host && c.mode == ep_mode::baseline)
    return bad(std::string("memory ") + ep_memory_name(c.memory) +
               " is built for the ll and normal modes only; baseline mode keeps its regions in "
               "host memory (fabric/DEVICE_MEMORY.md: CUDA tensors reach it through host "
               "staging)");
  return {};
}

}  // namespace

result<std::unique_ptr<ep_group>> ep_group::create(const transport_options& topt, bootstrap& boot,
                                                   const std::vector<int>& members,
                                                   const ep_config& cfg) {
  auto pos = std::find(members.begin(), members.end(), boot.rank());
  if (pos == members.end())
    return error{errc::invalid_argument, "EP group members do not include this rank"};
  auto g = std::make_unique<ep_group_impl>();
  g->cfg = cfg;
  g->ops = &mode_ops_of(cfg.mode);
  g->num_ranks = static_cast<int>(members.size());
  g->rank = static_cast<int>(pos - members.begin());
  if (auto st = validate(cfg, g->num_ranks); !st) return st.err();
  g->num_local_experts = cfg.num_experts / g->num_ranks;
  g->output_x.resize(static_cast<size_t>(cfg.output_slots));
  g->hidden_bytes = cfg.hidden * static_cast<int64_t>(ep_dtype_size(cfg.dtype));
  g->num_ranks_per_node = cfg.ranks_per_node > 0 ? cfg.ranks_per_node : g->num_ranks;
  g->num_nodes = g->num_ranks / g->num_ranks_per_node;
  auto payload = detail::ep_payload::create(cfg.memory, g->pool);
  if (!payload)
    return error{payload.err().code, std::string("EP: memory ") + ep_memory_name(cfg.memory) +
                                         ": " + payload.err().message};
  g->payload = std::move(*payload);
  const detail::ep_region_sizes sizes = g->ops->regions_plan(*g);
  auto tr = open_transport(topt);
  if (!tr) return tr.err();
  g->endpoint = std::move(*tr);
  g->abort = topt.abort;
  transport& t = *g->endpoint;

  auto alloc = [&](detail::buffer& b, int64_t size) -> status {
    auto r = make_buffer(t, size);
    if (!r) return r.err();
    b = std::move(*r);
    return {};
  };
  const int64_t num_ranks = g->num_ranks;
  // Dispatch's writes complete locally before dispatch_recv returns, so dispatch and
  // combine share one send staging buffer.
  // Count records: [step parity][source], then the forwarding phase's [step parity][source].
  const int64_t record_bytes = g->count_record_bytes;
  if (auto st = alloc(g->ctrl_recv, 4 * num_ranks * record_bytes); !st) return st.err();
  if (auto st = alloc(g->ctrl_send, 2 * num_ranks * record_bytes); !st) return st.err();
  if (auto st = alloc(g->dispatch_recv_region, sizes.dispatch_recv); !st) return st.err();
  if (auto st = alloc(g->staging, std::max(sizes.dispatch_send, sizes.combine_send)); !st)
    return st.err();
  // The split layout's payload rows: device regions (cuda), or registered host regions
  // (host_split, which runs the same code on host memory).
  auto alloc_payload = [&](detail::buffer& b, int64_t size) -> status {
    if (size == 0) return {};
    if (cfg.memory == ep_memory::host_split) return alloc(b, size);
    auto r = t.allocate_device_region(static_cast<size_t>(size));
    if (!r) return error{r.err().code, "EP: memory cuda: " + r.err().message};
    b.reg = *r;
    return {};
  };
  if (g->split()) {
    if (auto st = alloc_payload(g->combine_recv_region, sizes.combine_recv); !st) return st.err();
  } else if (auto st = alloc(g->combine_recv_region, sizes.combine_recv); !st) {
    return st.err();
  }
  for (auto [b, size] : {std::pair{&g->dispatch_payload_region, sizes.dispatch_payload},
                         std::pair{&g->payload_staging, sizes.payload_staging},
                         std::pair{&g->shared_payload_region, sizes.shared_payload},
                         std::pair{&g->output_payload_region, sizes.output_payload}})
    if (auto st = alloc_payload(*b, size); !st) return st.err();
  if (sizes.dispatch_output > 0) {
    // Normal mode's output holds payload rows only: device memory under cuda (same-host
    // peers store into it through CUDA IPC), shared host memory otherwise.
    auto out = cfg.memory == ep_memory::cuda
                   ? t.allocate_device_region(static_cast<size_t>(sizes.dispatch_output))
                   : t.allocate_host_region(static_cast<size_t>(sizes.dispatch_output));
    if (!out) return error{out.err().code, "EP: " + out.err().message};
    g->output_region.reg = *out;
    // A transport that shares no host memory (paths fabric) gives no region: the split
    // layout's output rows are then private payload memory (the interleaved layout's are
    // output_x).
    if (!g->output_region.reg.ptr && g->split())
      if (auto st = alloc_payload(g->output_payload_region, sizes.dispatch_output); !st)
        return st.err();
  }
  if (sizes.shared_inputs > 0) {
    auto in = t.allocate_host_region(static_cast<size_t>(sizes.shared_inputs));
    if (!in) return error{in.err().code, "EP: " + in.err().message};
    g->shared_inputs_region.reg = *in;
  }
  g->imm_counters.assign(proto::step_slots * 3 * 2 * num_ranks, 0);

  std::string mine = t.address();
  // ctrl, dispatch, combine, output, shared inputs, dispatch payload, shared payload (the
  // last two zero-sized outside the split layout; shared payload is low-latency's only)
  constexpr int kRegions = 7;
  const remote_region* regions[kRegions] = {&g->ctrl_recv.reg.remote,
                                            &g->dispatch_recv_region.reg.remote,
                                            &g->combine_recv_region.reg.remote,
                                            &g->output_region.reg.remote,
                                            &g->shared_inputs_region.reg.remote,
                                            &g->dispatch_payload_region.reg.remote,
                                            &g->shared_payload_region.reg.remote};
  for (const remote_region* r : regions)
    mine.append(reinterpret_cast<const char*>(r), sizeof(remote_region));
  auto all = boot.allgather(members, mine, cfg.op_timeout_ms);
  if (!all) return all.err();
  std::vector<std::string> addrs;
  for (const std::string& e : *all) {
    const size_t tail = kRegions * sizeof(remote_region);
    if (e.size() <= tail) return error{errc::malformed_message, "EP: short bootstrap record"};
    addrs.push_back(e.substr(0, e.size() - tail));
    detail::peer_regions pr;
    const char* at = e.data() + e.size() - tail;
    remote_region* into[kRegions] = {&pr.ctrl,          &pr.dispatch,      &pr.combine,
                                     &pr.output,        &pr.shared_inputs, &pr.dispatch_payload,
                                     &pr.shared_payload};
    for (int i = 0; i < kRegions; ++i)
      std::memcpy(into[i], at + i * sizeof(remote_region), sizeof(remote_region));
    g->peers.push_back(pr);
  }
  if (auto st = t.set_peers(addrs); !st) return st.err();
  // Device rows reach a network peer only where the provider writes device memory (FI_HMEM).
  // Every rank of a group that spans hosts has a network peer, so all of them refuse here.
  const std::vector<std::string>& device_paths = t.describe().peer_device_paths;
  for (size_t p = 0; cfg.memory == ep_memory::cuda && p < device_paths.size(); ++p)
    if (device_paths[p] == "host_staging")
      return error{errc::invalid_argument,
                   "EP: memory cuda: rank " + std::to_string(p) + " is on another host and the " +
                       "provider (" + t.describe().provider +
                       ") has no FI_HMEM, so device rows cannot travel to it; use memory host "
                       "(CUDA tensors then go through host staging)"};
  // Nobody writes before every rank knows every address.
  if (auto b = boot.allgather(members, "", cfg.op_timeout_ms); !b) return b.err();
  return std::unique_ptr<ep_group>(new ep_group(std::move(g)));
}

ep_group::ep_group(std::unique_ptr<ep_group_impl> impl) : impl_(std::move(impl)) {}
ep_group::~ep_group() = default;
int ep_group::rank() const { return impl_->rank; }
int ep_group::num_ranks() const { return impl_->num_ranks; }
int ep_group::num_local_experts() const { return impl_->num_local_experts; }
const ep_config& ep_group::config() const { return impl_->cfg; }
const transport_description& ep_group::describe() const { return impl_->endpoint->describe(); }
const ep_step_bytes& ep_group::last_step_bytes() const { return impl_->step_bytes; }

// ---- dispatch -------------------------------------------------------------------------

namespace detail {

status ep_group_impl::dispatch_send(const void* x_in, const int64_t* idx, const float* weights,
                                    int64_t num_tokens_in) {
  if (auto st = check_usable(); !st) return st;
  if (phase != ep_phase::idle)
    return error{errc::invalid_argument, "dispatch_send: the previous step has not been combined"};
  if (num_tokens_in < 0 || num_tokens_in > cfg.max_tokens_per_rank)
    return error{errc::invalid_argument, "dispatch_send: num_tokens " +
                                             std::to_string(num_tokens_in) + " outside 0.." +
                                             std::to_string(cfg.max_tokens_per_rank)};
  if (num_tokens_in > 0 && (!x_in || !idx || !weights))
    return error{errc::invalid_argument, "dispatch_send: null input"};
  if (expert_stride() > 0 && !recv_rows)
    return error{errc::invalid_argument,
                 "dispatch_send: ll_expert_stride is set and no set_recv_rows() named where the "
                 "received rows go"};
  std::vector<int64_t> per_expert(cfg.num_experts), per_rank(num_ranks);
  std::vector<uint8_t> in_rank(static_cast<size_t>(num_tokens_in * num_ranks));
  token_rank_slot.assign(static_cast<size_t>(num_tokens_in * num_ranks), -1);
  kernels::dispatch_layout_params lp;
  lp.num_tokens = num_tokens_in;
  lp.topk = cfg.topk;
  lp.num_experts = cfg.num_experts;
  lp.num_ranks = num_ranks;
  kernels::dispatch_layout_out lo;
  lo.num_tokens_per_expert = per_expert.data();
  lo.num_tokens_per_rank = per_rank.data();
  lo.is_token_in_rank = in_rank.data();
  lo.token_rank_slot = token_rank_slot.data();
  if (auto st = kernels::get_dispatch_layout(pool, num_tokens_in > 0 ? idx : nullptr, lp, lo); !st)
    return st;

  ++seq;
  deadline = now_ns() + cfg.op_timeout_ms * 1000000;
  step_bytes = {};
  x = x_in;
  topk_idx = idx;
  topk_weights = weights;
  num_tokens = num_tokens_in;
  num_rows_to.assign(num_ranks, 0);
  entries_per_expert = std::move(per_expert);
  in_place_to.assign(num_ranks, 0);
  if (auto st = ops->dispatch_pack(*this, in_rank.data()); !st) return st;

  // Counts first (PROTOCOL.md, phase 1). Receivers do not rely on them arriving first.
  const int64_t max_rows = *std::max_element(num_rows_to.begin(), num_rows_to.end());
  const bool with_entries = count_record_bytes > static_cast<int64_t>(sizeof(count_record));
  for (int d = 0; d < num_ranks; ++d) {
    char* at = ctrl_send.data() + d * count_record_bytes;
    const count_record rec{static_cast<uint64_t>(num_rows_to[d]), static_cast<uint64_t>(max_rows),
                           in_place_to[d] ? proto::count_flag_in_place : 0,
                           static_cast<uint64_t>(output_slot)};
    std::memcpy(at, &rec, sizeof rec);
    for (int e = 0; with_entries && e < cfg.num_experts; ++e) {
      const auto n = static_cast<uint32_t>(entries_per_expert[e]);
      std::memcpy(at + sizeof rec + 4 * e, &n, 4);
    }
    const int64_t off = ((seq & 1) * num_ranks + rank) * count_record_bytes;
    if (auto st = write(d, at, count_record_bytes, peers[d].ctrl, off, proto::imm_count,
                        step_bytes.dispatch_wire, step_bytes.dispatch_writes);
        !st)
      return st;
  }
  if (auto st = ops->dispatch_eager_write(*this); !st) return st;
  phase = ep_phase::dispatch_sent;
  return {};
}

result<const dispatch_output*> ep_group_impl::dispatch_recv() {
  if (auto st = check_usable(); !st) return st.err();
  if (phase != ep_phase::dispatch_sent)
    return error{errc::invalid_argument, "dispatch_recv without dispatch_send"};
  // Phase 1: one count record from every rank.
  if (auto st = wait_for(proto::imm_count, std::vector<int64_t>(num_ranks, 1), "count exchange");
      !st)
    return st.err();
  num_rows_from.assign(num_ranks, 0);
  in_place_from.assign(num_ranks, 0);
  num_padded_rows = 0;
  for (int s = 0; s < num_ranks; ++s) {
    const count_record& rec = record_from(s);
    num_rows_from[s] = static_cast<int64_t>(rec.rows);
    num_padded_rows = std::max<int64_t>(num_padded_rows, static_cast<int64_t>(rec.max_rows));
    const int64_t limit = max_recv_rows_per_source;
    if (num_rows_from[s] > limit || static_cast<int64_t>(rec.max_rows) > limit)
      return fail(error{errc::malformed_message, "EP: rank " + std::to_string(s) + " announced " +
                                                     std::to_string(rec.rows) + " rows, over the " +
                                                     std::to_string(limit) + " this group holds"});
    const bool in_place = (rec.flags & proto::count_flag_in_place) != 0;
    if ((rec.flags & ~proto::count_flag_in_place) != 0 ||
        rec.output_slot >= static_cast<uint64_t>(cfg.output_slots) ||
        (in_place && !output_region.reg.ptr && !peer_shared_inputs(s)))
      return fail(error{errc::malformed_message,
                        "EP: rank " + std::to_string(s) + " sent count record flags " +
                            std::to_string(rec.flags) + " this group does not accept"});
    in_place_from[s] = in_place;
  }

  // Phase 2: the mode's bulk data (normal, baseline), now that every peer has announced it
  // is in this step (and so done reading its receive region from the previous one).
  std::vector<int64_t> expected(num_ranks, 0);
  if (auto st = ops->dispatch_bulk_write(*this, expected); !st) return st.err();
  if (auto st = wait_for(proto::imm_dispatch, expected, "dispatch data"); !st) return st.err();
  if (auto st = ops->dispatch_output_build(*this); !st) return st.err();
  return finish_output();
}

// ---- combine --------------------------------------------------------------------------

// Split without shared payload (normal mode): payload memory of the group's own, which the
// caller fills with device copies under cuda (nullptr: the device allocation failed).
char* ep_group_impl::private_payload_rows(int which, int64_t bytes) {
  auto p = payload->private_rows(which, bytes);
  return p ? *p : nullptr;
}

void* ep_group_impl::dispatch_buffer() {
  if (phase != ep_phase::idle) return nullptr;
  if (split() && !shared_payload_region.reg.ptr)
    return private_payload_rows(0, cfg.max_tokens_per_rank * hidden_bytes);
  if (split()) return shared_payload_region.data() + dispatch_rows_offset;
  if (shared_inputs_region.reg.ptr) return shared_inputs_region.data() + dispatch_rows_offset;
  dispatch_private.resize(static_cast<size_t>(cfg.max_tokens_per_rank * hidden_bytes));
  return dispatch_private.data();
}

void* ep_group_impl::combine_buffer() {
  if (phase != ep_phase::dispatched) return nullptr;
  if (split() && !shared_payload_region.reg.ptr)
    return private_payload_rows(1, combine_buffer_rows(output.num_recv_rows) * hidden_bytes);
  if (split()) return shared_payload_region.data() + combine_rows_offset;
  if (shared_inputs_region.reg.ptr) return shared_inputs_region.data() + combine_rows_offset;
  combine_private.resize(
      static_cast<size_t>(combine_buffer_rows(output.num_recv_rows) * hidden_bytes));
  return combine_private.data();
}

status ep_group_impl::combine_send(const dispatch_output& handle, const void* expert_out) {
  if (auto st = check_usable(); !st) return st;
  if (phase != ep_phase::dispatched || handle.seq != seq || &handle != &output)
    return error{errc::invalid_argument,
                 "combine_send: handle is not this group's latest dispatch"};
  if (handle.num_recv_rows > 0 && !expert_out)
    return error{errc::invalid_argument, "combine_send: null expert_out"};
  deadline = now_ns() + cfg.op_timeout_ms * 1000000;
  if (auto st = ops->combine_write(*this, static_cast<const char*>(expert_out)); !st) return st;
  phase = ep_phase::combine_sent;
  return {};
}

status ep_group_impl::combine_recv(void* y) {
  if (auto st = check_usable(); !st) return st;
  if (phase != ep_phase::combine_sent)
    return error{errc::invalid_argument, "combine_recv without combine_send"};
  if (num_tokens > 0 && !y) return error{errc::invalid_argument, "combine_recv: null y"};
  std::vector<int64_t> expected(num_ranks, 0);
  ops->combine_completions_expect(*this, expected);
  if (auto st = wait_for(proto::imm_combine, expected, "combine data"); !st) return st;

  combine_terms terms;
  if (auto built = ops->combine_terms_build(*this, terms); !built) return built;
  // Reduced where the rows are (device memory with ep_memory cuda): terms in several buffers
  // (low-latency, read in place) by pointer, the others by slot of the combine region.
  status st = {};
  if (num_tokens > 0 && !terms.rows.empty())
    st = payload->combine_rows(cfg.dtype, terms.rows.data(), terms.weight, num_tokens, terms.width,
                               cfg.hidden, y);
  else if (num_tokens > 0)
    st = payload->combine(cfg.dtype, combine_recv_region.data(), terms.slot.data(), terms.weight,
                          num_tokens, terms.width, cfg.hidden, terms.num_region_rows, y);
  phase = ep_phase::idle;
  return st;
}

}  // namespace detail

// ---- public forwarding ------------------------------------------------------------------

status ep_group::dispatch_send(const void* x, const int64_t* topk_idx, const float* topk_weights,
                               int64_t num_tokens) {
  return impl_->dispatch_send(x, topk_idx, topk_weights, num_tokens);
}
result<const dispatch_output*> ep_group::dispatch_recv() { return impl_->dispatch_recv(); }
result<const dispatch_output*> ep_group::dispatch(const void* x, const int64_t* topk_idx,
                                                  const float* topk_weights, int64_t num_tokens) {
  if (auto st = dispatch_send(x, topk_idx, topk_weights, num_tokens); !st) return st.err();
  return dispatch_recv();
}
status ep_group::combine_send(const dispatch_output& handle, const void* expert_out) {
  return impl_->combine_send(handle, expert_out);
}
status ep_group::combine_recv(void* y) { return impl_->combine_recv(y); }
void* ep_group::combine_buffer() { return impl_->combine_buffer(); }
status ep_group::set_recv_rows(void* rows) {
  if (impl_->expert_stride() == 0)
    return error{errc::invalid_argument,
                 "set_recv_rows: the group keeps its own recv_x unless ll_expert_stride is set"};
  impl_->recv_rows = static_cast<char*>(rows);
  return {};
}
void* ep_group::dispatch_buffer() { return impl_->dispatch_buffer(); }
ep_group::slot_file ep_group::output_slot_file(int slot) const {
  const auto& g = *impl_;
  slot_file f;
  if (slot < 0 || slot >= g.cfg.output_slots || !g.output_region.reg.ptr ||
      g.cfg.memory != ep_memory::host)
    return f;
  f.fd = g.output_region.reg.remote.host_fd;
  f.offset = slot * g.output_slot_bytes;
  f.bytes = g.output_slot_bytes;
  if (f.fd < 0 || f.offset % 4096 != 0 || f.bytes % 4096 != 0) return slot_file{};
  return f;
}

status ep_group::select_output_slot(int slot) {
  if (slot < 0 || slot >= impl_->cfg.output_slots)
    return error{errc::invalid_argument, "select_output_slot: slot " + std::to_string(slot) +
                                             " outside 0.." +
                                             std::to_string(impl_->cfg.output_slots - 1)};
  // A broken group reports its first error, as every later call does.
  if (auto st = impl_->check_usable(); !st) return st;
  if (impl_->phase != detail::ep_phase::idle)
    return error{errc::invalid_argument, "select_output_slot: a step is in progress"};
  impl_->output_slot = slot;
  return {};
}
status ep_group::combine(const dispatch_output& handle, const void* expert_out, void* y) {
  if (auto st = combine_send(handle, expert_out); !st) return st;
  return combine_recv(y);
}

}  // namespace moerl::fabric
