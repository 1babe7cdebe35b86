#include "fabric/ep_group.h"

#include <algorithm>
#include <cstring>

#include <sched.h>
#include <sys/mman.h>

#include "common/config.h"
#include "fabric/ep_protocol.h"
#include "kernels/combine.h"
#include "kernels/dispatch_layout.h"
#include "kernels/dtypes.h"
#include "kernels/thread_pool.h"

namespace moerl::fabric {

using proto::count_record;
using proto::entry_meta;

const char* ep_mode_name(ep_mode m) {
  switch (m) {
    case ep_mode::normal: return "normal";
    case ep_mode::low_latency: return "ll";
    case ep_mode::baseline: return "baseline";
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

namespace {

// Registered buffers are whole mappings of their own: once a group is destroyed its
// regions are unmapped, so a late write from a peer of the old group faults at the
// writer instead of landing in memory the process reuses.
struct unmap {
  size_t size;
  void operator()(char* p) const { ::munmap(p, size); }
};

// A registered buffer: owned bytes plus their registration.
struct buffer {
  std::unique_ptr<char, unmap> bytes{nullptr, unmap{0}};
  local_region reg;
  char* data() const { return bytes.get(); }
};

struct peer_regions {
  remote_region ctrl, dispatch, combine;
};

enum class phase { idle, dispatch_sent, dispatched, combine_sent };

}  // namespace

struct ep_group::impl {
  ep_config cfg;
  int rank = 0, n = 0, le = 0;
  int64_t hidden_bytes = 0, row_bytes = 0;
  int64_t cap = 0;  // rows a rank may receive from one peer (ll, baseline)
  // normal mode across nodes: R ranks per node, N nodes, F rows a rank can receive from
  // one gateway of its node per step; hier when there is more than one node.
  int R = 1, N = 1;
  int64_t F = 0;
  bool hier = false;
  int node_of(int r) const { return r / R; }
  int local_of(int r) const { return r % R; }
  int gateway(int node) const { return node * R + local_of(rank); }
  std::vector<peer_regions> peers;
  buffer ctrl_recv, ctrl_send, disp_recv, staging, comb_recv;
  // Declared after the buffers so it is destroyed first: the endpoint and its
  // registrations close before the memory they cover is unmapped.
  std::unique_ptr<transport> t;
  kernels::thread_pool pool{1};

  uint32_t seq = 0;
  phase ph = phase::idle;
  int64_t deadline = 0;
  error broken;
  bool is_broken = false;
  // counters[step % 16][kind][forwarded][src]: immediates received, reset when their step
  // completes.
  std::vector<uint32_t> counters;
  std::vector<uint32_t> imms;
  ep_step_bytes bytes;

  // The step's inputs and send-side layout.
  const void* x = nullptr;
  const int64_t* topk_idx = nullptr;
  const float* topk_w = nullptr;
  int64_t num_tokens = 0;
  std::vector<int64_t> send_rows;        // [n] rows for each destination
  std::vector<int64_t> token_rank_slot;  // [num_tokens, n] (normal)
  std::vector<int64_t> dest_slot;        // normal: [num_tokens, n] row of the token at destination
                                         // (a rank of our node, or a gateway), -1 if none
  std::vector<int64_t> fwd_rows;         // gateway: [R] rows forwarded to each rank of the node
  std::vector<int64_t> fwd_recv_rows;    // [R] rows forwarded to us by each gateway of the node
  std::vector<int64_t> gw_slot;          // gateway: [n * T, R] position of inter row (s, i) in
                                         // the stream forwarded to local rank l, -1 if none
  std::vector<int64_t> entry_slot;       // [num_tokens, topk] row index at destination (ll, baseline)
  std::vector<int64_t> recv_rows;        // [n] rows from each source
  int64_t padded_rows = 0;               // baseline: the step's block size in rows

  // Receive-side handle for combine.
  dispatch_output out;
  std::vector<char> out_x;
  std::vector<int64_t> recv_slot;  // normal: [receive-region row, topk] output row of each entry
  std::vector<float> recv_w;       // normal: [receive-region row, topk]
  std::vector<int64_t> out_pos;    // ll/baseline: row's index inside its source's block

  // Turns rows per local expert (per_expert[1 + j]) into offsets and sizes the step's output
  // for that many rows; returns the total. Every mode's receive path starts here.
  int64_t start_output(std::vector<int64_t>& per_expert) {
    for (int j = 0; j < le; ++j) per_expert[j + 1] += per_expert[j];
    const int64_t total = per_expert[le];
    out.seq = seq;
    out.expert_offset = per_expert;
    out.num_recv_rows = total;
    out_x.resize(static_cast<size_t>(std::max<int64_t>(total, 1) * hidden_bytes));
    out.src_rank.assign(total, 0);
    out.src_token.assign(total, 0);
    out.src_k.assign(total, 0);
    out_pos.assign(total, 0);
    return total;
  }

  uint32_t& counter(uint32_t step, uint32_t kind, int src, uint32_t fwd = 0) {
    return counters[(((step % proto::step_slots) * 3 + kind) * 2 + fwd) * n + src];
  }
  int64_t ll_writes(int64_t rows) const {
    return (rows + cfg.ll_entries_per_write - 1) / cfg.ll_entries_per_write;
  }
  int64_t chunks(int64_t nbytes) const {
    const auto c = static_cast<int64_t>(cfg.chunk_bytes);
    return nbytes == 0 ? 0 : (nbytes + c - 1) / c;
  }

  error fail(error e) {
    if (!is_broken) {
      is_broken = true;
      broken = e;
    }
    return e;
  }
  status check_usable() const {
    if (is_broken) return error{broken.code, "EP group unusable after earlier error: " + broken.message};
    return {};
  }

  status progress() {
    imms.clear();
    if (auto st = t->progress(imms); !st) return fail(st.err());
    for (uint32_t imm : imms) {
      const uint32_t kind = proto::imm_kind_of(imm), src = proto::imm_src_of(imm);
      if (kind == proto::imm_reserved || src >= static_cast<uint32_t>(n) ||
          proto::imm_reserved_bits(imm) != 0)
        return fail(error{errc::malformed_message, "EP: unexpected immediate " + std::to_string(imm)});
      ++counter(proto::imm_step_of(imm), kind, static_cast<int>(src), proto::imm_forwarded_of(imm));
    }
    return {};
  }

  // Progresses until counter(seq, kind, r, fwd) == expected[r] for every r and our own writes
  // completed locally. On the deadline: a timeout naming the ranks still missing.
  status wait_for(uint32_t kind, const std::vector<int64_t>& expected, const char* what,
                  uint32_t fwd = 0) {
    for (;;) {
      bool done = t->outstanding() == 0;
      for (int r = 0; r < n && done; ++r)
        if (counter(seq, kind, r, fwd) < expected[r]) done = false;
      if (done) break;
      if (auto st = progress(); !st) return st;
      // Ranks may outnumber cores (a dev box): give the CPU to the peer we wait for.
      if (imms.empty()) sched_yield();
      if (now_ns() > deadline) {
        std::string missing;
        for (int r = 0; r < n; ++r)
          if (counter(seq, kind, r, fwd) < expected[r])
            missing += (missing.empty() ? "" : ",") + std::to_string(r) + "(" +
                       std::to_string(counter(seq, kind, r, fwd)) + "/" + std::to_string(expected[r]) + ")";
        return fail(error{errc::timeout,
                          std::string("EP step ") + std::to_string(seq) + ": " + what +
                              " incomplete after " + std::to_string(cfg.op_timeout_ms) +
                              " ms; missing from ranks " + (missing.empty() ? "none" : missing) +
                              (t->outstanding() ? "; own writes still outstanding" : "")});
      }
    }
    for (int r = 0; r < n; ++r) {
      if (counter(seq, kind, r, fwd) != expected[r])
        return fail(error{errc::malformed_message, std::string("EP: more ") + what +
                                                       " completions than announced from rank " +
                                                       std::to_string(r)});
      counter(seq, kind, r, fwd) = 0;
    }
    return {};
  }

  status write(int peer, const char* src, int64_t len, const remote_region& dst, int64_t off,
               uint32_t kind, uint64_t& wire, uint64_t& writes, uint32_t fwd = 0) {
    if (auto st = t->write(peer, staging_or_ctrl(src), src, static_cast<size_t>(len), dst,
                           static_cast<uint64_t>(off),
                           proto::make_imm(static_cast<proto::imm_kind>(kind), seq, rank, fwd), deadline);
        !st)
      return fail(st.err());
    wire += static_cast<uint64_t>(len);
    ++writes;
    return {};
  }
  const local_region& staging_or_ctrl(const char* p) const {
    return (p >= ctrl_send.data() && p < ctrl_send.data() + ctrl_send.reg.size) ? ctrl_send.reg
                                                                                   : staging.reg;
  }
  // Bulk data in chunks of cfg.chunk_bytes, each with its own immediate.
  status write_chunked(int peer, const char* src, int64_t len, const remote_region& dst,
                       int64_t off, uint32_t kind, uint64_t& wire, uint64_t& writes, uint32_t fwd = 0) {
    const auto c = static_cast<int64_t>(cfg.chunk_bytes);
    for (int64_t done = 0; done < len; done += c)
      if (auto st = write(peer, src + done, std::min(c, len - done), dst, off + done, kind, wire, writes, fwd);
          !st)
        return st;
    return {};
  }

  status dispatch_send(const void* xin, const int64_t* idx, const float* w, int64_t T);
  result<const dispatch_output*> dispatch_recv();
  status forward_to_node();
  result<const dispatch_output*> normal_output();
  status combine_send(const dispatch_output& handle, const void* expert_out);
  status combine_recv(void* y);
  void build_output(const std::vector<std::pair<const char*, int>>& rows_meta);
};

// ---- creation -------------------------------------------------------------------------

namespace {

result<buffer> make_buffer(transport& t, int64_t size) {
  buffer b;
  size = std::max<int64_t>(size, 64);
  void* p = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED)
    return error{errc::capacity_exceeded, "EP: cannot map " + std::to_string(size) + " bytes"};
  b.bytes = std::unique_ptr<char, unmap>(static_cast<char*>(p), unmap{static_cast<size_t>(size)});
  auto reg = t.register_memory(b.bytes.get(), static_cast<size_t>(size));
  if (!reg) return reg.err();
  b.reg = *reg;
  return b;
}

status validate(const ep_config& c, int n) {
  auto bad = [](const std::string& m) { return error{errc::invalid_argument, "EP config: " + m}; };
  if (n < 1 || n > proto::max_ranks) return bad("group size must be 1..4096");
  if (c.num_experts < n || c.num_experts % n != 0)
    return bad("num_experts (" + std::to_string(c.num_experts) + ") must be a positive multiple of the group size (" +
               std::to_string(n) + ")");
  if (c.hidden < 1) return bad("hidden must be >= 1");
  if (c.topk < 1 || c.topk > c.num_experts) return bad("topk must be 1..num_experts");
  if (c.max_tokens_per_rank < 1) return bad("max_tokens_per_rank must be >= 1");
  if (c.chunk_bytes < 4096) return bad("chunk_bytes must be >= 4096");
  if (c.op_timeout_ms < 1) return bad("op_timeout_ms must be >= 1");
  if (c.rows_per_peer < 0) return bad("rows_per_peer must be >= 0");
  if (c.ll_entries_per_write < 1) return bad("ll_entries_per_write must be >= 1");
  if (c.ranks_per_node < 0 || (c.ranks_per_node > 0 && n % c.ranks_per_node != 0))
    return bad("ranks_per_node (" + std::to_string(c.ranks_per_node) + ") must divide the group size (" +
               std::to_string(n) + ")");
  return {};
}

}  // namespace

result<std::unique_ptr<ep_group>> ep_group::create(const transport_options& topt, bootstrap& boot,
                                                   const std::vector<int>& members,
                                                   const ep_config& cfg) {
  auto pos = std::find(members.begin(), members.end(), boot.rank());
  if (pos == members.end())
    return error{errc::invalid_argument, "EP group members do not include this rank"};
  auto p = std::make_unique<impl>();
  p->cfg = cfg;
  p->n = static_cast<int>(members.size());
  p->rank = static_cast<int>(pos - members.begin());
  if (auto st = validate(cfg, p->n); !st) return st.err();
  p->le = cfg.num_experts / p->n;
  p->hidden_bytes = cfg.hidden * static_cast<int64_t>(ep_dtype_size(cfg.dtype));
  const int64_t meta = cfg.mode == ep_mode::normal ? proto::normal_meta_bytes(cfg.topk)
                                                   : static_cast<int64_t>(sizeof(entry_meta));
  p->row_bytes = proto::align_up(p->hidden_bytes + meta, 16);
  const int64_t n = p->n, T = cfg.max_tokens_per_rank;
  const int64_t worst = T * std::min<int64_t>(cfg.topk, p->le);
  p->cap = cfg.mode != ep_mode::normal && cfg.rows_per_peer > 0 ? cfg.rows_per_peer
                                                                           : worst;
  p->R = cfg.ranks_per_node > 0 ? cfg.ranks_per_node : p->n;
  p->N = p->n / p->R;
  p->hier = cfg.mode == ep_mode::normal && p->N > 1;
  p->F = (p->N - 1) * cfg.max_tokens_per_rank;
  auto tr = open_transport(topt);
  if (!tr) return tr.err();
  p->t = std::move(*tr);
  transport& t = *p->t;

  // Region sizes per mode (PROTOCOL.md, "Buffers").
  int64_t disp_recv = 0, disp_send = 0, comb_recv = 0, comb_send = 0;
  switch (cfg.mode) {
    case ep_mode::normal: {
      // [n][T] direct (and, across nodes, inter-node) rows, then [R][F] forwarded rows.
      const int64_t rows = n * T + p->R * p->F;
      disp_recv = rows * p->row_bytes;
      disp_send = rows * p->row_bytes;
      comb_recv = rows * p->hidden_bytes;
      comb_send = rows * p->hidden_bytes;
      break;
    }
    case ep_mode::low_latency:
      disp_recv = 2 * n * p->cap * p->row_bytes;  // double-buffered by step parity
      disp_send = n * p->cap * p->row_bytes;
      comb_recv = n * p->cap * p->hidden_bytes;
      comb_send = n * p->cap * p->hidden_bytes;
      break;
    case ep_mode::baseline:
      disp_recv = n * p->cap * p->row_bytes;
      disp_send = n * p->cap * p->row_bytes;
      comb_recv = n * p->cap * p->hidden_bytes;
      comb_send = n * p->cap * p->hidden_bytes;
      break;
  }
  auto alloc = [&](buffer& b, int64_t size) -> status {
    auto r = make_buffer(t, size);
    if (!r) return r.err();
    b = std::move(*r);
    return {};
  };
  // Dispatch's writes complete locally before dispatch_recv returns, so dispatch and
  // combine share one send staging buffer.
  // Count records: [step parity][source], then the forwarding phase's [step parity][source].
  if (auto st = alloc(p->ctrl_recv, 4 * n * sizeof(count_record)); !st) return st.err();
  if (auto st = alloc(p->ctrl_send, 2 * n * sizeof(count_record)); !st) return st.err();
  if (auto st = alloc(p->disp_recv, disp_recv); !st) return st.err();
  if (auto st = alloc(p->staging, std::max(disp_send, comb_send)); !st) return st.err();
  if (auto st = alloc(p->comb_recv, comb_recv); !st) return st.err();
  p->counters.assign(proto::step_slots * 3 * 2 * n, 0);

  std::string mine = t.address();
  for (const remote_region* r : {&p->ctrl_recv.reg.remote, &p->disp_recv.reg.remote, &p->comb_recv.reg.remote})
    mine.append(reinterpret_cast<const char*>(r), sizeof(remote_region));
  auto all = boot.allgather(members, mine, cfg.op_timeout_ms);
  if (!all) return all.err();
  std::vector<std::string> addrs;
  for (const std::string& e : *all) {
    const size_t tail = 3 * sizeof(remote_region);
    if (e.size() <= tail) return error{errc::malformed_message, "EP: short bootstrap record"};
    addrs.push_back(e.substr(0, e.size() - tail));
    peer_regions pr;
    const char* regions = e.data() + e.size() - tail;  // ctrl, dispatch, combine
    std::memcpy(&pr.ctrl, regions, sizeof(remote_region));
    std::memcpy(&pr.dispatch, regions + sizeof(remote_region), sizeof(remote_region));
    std::memcpy(&pr.combine, regions + 2 * sizeof(remote_region), sizeof(remote_region));
    p->peers.push_back(pr);
  }
  if (auto st = t.set_peers(addrs); !st) return st.err();
  // Nobody writes before every rank knows every address.
  if (auto b = boot.allgather(members, "", cfg.op_timeout_ms); !b) return b.err();
  return std::unique_ptr<ep_group>(new ep_group(std::move(p)));
}

ep_group::ep_group(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
ep_group::~ep_group() = default;
int ep_group::rank() const { return impl_->rank; }
int ep_group::num_ranks() const { return impl_->n; }
int ep_group::num_local_experts() const { return impl_->le; }
const ep_config& ep_group::config() const { return impl_->cfg; }
const transport_description& ep_group::describe() const { return impl_->t->describe(); }
const ep_step_bytes& ep_group::last_step_bytes() const { return impl_->bytes; }

// ---- dispatch -------------------------------------------------------------------------

status ep_group::impl::dispatch_send(const void* xin, const int64_t* idx, const float* w,
                                     int64_t T) {
  if (auto st = check_usable(); !st) return st;
  if (ph != phase::idle)
    return error{errc::invalid_argument, "dispatch_send: the previous step has not been combined"};
  if (T < 0 || T > cfg.max_tokens_per_rank)
    return error{errc::invalid_argument, "dispatch_send: num_tokens " + std::to_string(T) +
                                             " outside 0.." + std::to_string(cfg.max_tokens_per_rank)};
  if (T > 0 && (!xin || !idx || !w))
    return error{errc::invalid_argument, "dispatch_send: null input"};
  const int topk = cfg.topk;
  std::vector<int64_t> per_expert(cfg.num_experts), per_rank(n);
  std::vector<uint8_t> in_rank(static_cast<size_t>(T * n));
  token_rank_slot.assign(static_cast<size_t>(T * n), -1);
  kernels::dispatch_layout_params lp;
  lp.num_tokens = T;
  lp.topk = topk;
  lp.num_experts = cfg.num_experts;
  lp.num_ranks = n;
  kernels::dispatch_layout_out lo;
  lo.num_tokens_per_expert = per_expert.data();
  lo.num_tokens_per_rank = per_rank.data();
  lo.is_token_in_rank = in_rank.data();
  lo.token_rank_slot = token_rank_slot.data();
  if (auto st = kernels::get_dispatch_layout(pool, T > 0 ? idx : nullptr, lp, lo); !st) return st;

  ++seq;
  deadline = now_ns() + cfg.op_timeout_ms * 1000000;
  bytes = {};
  x = xin;
  topk_idx = idx;
  topk_w = w;
  num_tokens = T;
  send_rows.assign(n, 0);
  const char* xb = static_cast<const char*>(xin);

  if (cfg.mode == ep_mode::normal) {
    // Destinations: the ranks of our node that hold one of the token's experts, and for
    // every other node holding one, that node's gateway (its rank with our local index).
    // Inside one node that is simply every rank the token goes to.
    dest_slot.assign(static_cast<size_t>(T * n), -1);
    for (int64_t tk = 0; tk < T; ++tk)
      for (int d = 0; d < n; ++d) {
        if (!in_rank[tk * n + d]) continue;
        const int dest = !hier || node_of(d) == node_of(rank) ? d : gateway(node_of(d));
        if (dest_slot[tk * n + dest] < 0) dest_slot[tk * n + dest] = send_rows[dest]++;
      }
    // Pack: staging[dest][i] is the i-th token (ascending index) going to dest.
    for (int64_t tk = 0; tk < T; ++tk)
      for (int d = 0; d < n; ++d) {
        const int64_t i = dest_slot[tk * n + d];
        if (i < 0) continue;
        char* row = staging.data() + (d * cfg.max_tokens_per_rank + i) * row_bytes;
        std::memcpy(row, xb + tk * hidden_bytes, hidden_bytes);
        char* meta = row + hidden_bytes;
        const int32_t token = static_cast<int32_t>(tk), source = rank;
        std::memcpy(meta, &token, 4);
        std::memcpy(meta + 4, &source, 4);
        for (int k = 0; k < topk; ++k) {
          const auto e = static_cast<int32_t>(idx[tk * topk + k]);
          std::memcpy(meta + 8 + 4 * k, &e, 4);
        }
        std::memcpy(meta + 8 + 4 * topk, w + tk * topk, 4 * static_cast<size_t>(topk));
      }
  } else {
    // One row per (token, expert) entry, numbered per destination in (token, k) order.
    entry_slot.assign(static_cast<size_t>(T * topk), -1);
    for (int64_t tk = 0; tk < T; ++tk)
      for (int k = 0; k < topk; ++k) {
        const int64_t e = idx[tk * topk + k];
        if (e < 0) continue;
        const int d = static_cast<int>(e / le);
        entry_slot[tk * topk + k] = send_rows[d]++;
      }
    for (int d = 0; d < n; ++d)
      if (send_rows[d] > cap)
        return error{errc::capacity_exceeded,
                     "dispatch_send: " + std::to_string(send_rows[d]) + " entries for rank " +
                         std::to_string(d) + " exceed its " + std::to_string(cap) +
                         " receive rows (a token names one expert twice, or rows_per_peer is too small)"};
    for (int64_t tk = 0; tk < T; ++tk)
      for (int k = 0; k < topk; ++k) {
        const int64_t e = idx[tk * topk + k];
        if (e < 0) continue;
        const int d = static_cast<int>(e / le);
        // staging[d][slot]: entries for d in (token, k) order, the block d receives.
        const int64_t srow = d * cap + entry_slot[tk * topk + k];
        char* row = staging.data() + srow * row_bytes;
        std::memcpy(row, xb + tk * hidden_bytes, hidden_bytes);
        entry_meta m{static_cast<int32_t>(tk), k, static_cast<int32_t>(e), 0};
        std::memcpy(row + hidden_bytes, &m, sizeof m);
      }
  }

  // Counts first (PROTOCOL.md, phase 1). Receivers do not rely on them arriving first.
  const int64_t max_rows = *std::max_element(send_rows.begin(), send_rows.end());
  auto* rec = reinterpret_cast<count_record*>(ctrl_send.data());
  for (int d = 0; d < n; ++d) {
    rec[d] = count_record{static_cast<uint64_t>(send_rows[d]), static_cast<uint64_t>(max_rows)};
    const int64_t off = ((seq & 1) * n + rank) * static_cast<int64_t>(sizeof(count_record));
    if (auto st = write(d, reinterpret_cast<const char*>(&rec[d]), sizeof(count_record),
                        peers[d].ctrl, off, proto::imm_count, bytes.dispatch_wire, bytes.dispatch_writes);
        !st)
      return st;
  }

  // Low latency: write every entry straight into its slot now, without waiting for
  // peers; ll_entries_per_write (default 1: one write per (token, expert)) lets adjacent
  // slots share a write.
  if (cfg.mode == ep_mode::low_latency) {
    const int64_t half = (seq & 1) * n * cap, b = cfg.ll_entries_per_write;
    for (int d = 0; d < n; ++d)
      for (int64_t i = 0; i < send_rows[d]; i += b)
        if (auto st = write(d, staging.data() + (d * cap + i) * row_bytes,
                            std::min(b, send_rows[d] - i) * row_bytes, peers[d].dispatch,
                            (half + rank * cap + i) * row_bytes, proto::imm_dispatch,
                            bytes.dispatch_wire, bytes.dispatch_writes);
            !st)
          return st;
  }
  ph = phase::dispatch_sent;
  return {};
}

result<const dispatch_output*> ep_group::impl::dispatch_recv() {
  if (auto st = check_usable(); !st) return st.err();
  if (ph != phase::dispatch_sent)
    return error{errc::invalid_argument, "dispatch_recv without dispatch_send"};
  // Phase 1: one count record from every rank.
  if (auto st = wait_for(proto::imm_count, std::vector<int64_t>(n, 1), "count exchange"); !st)
    return st.err();
  const auto* rec =
      reinterpret_cast<const count_record*>(ctrl_recv.data() + (seq & 1) * n * sizeof(count_record));
  recv_rows.assign(n, 0);
  padded_rows = 0;
  for (int s = 0; s < n; ++s) {
    recv_rows[s] = static_cast<int64_t>(rec[s].rows);
    padded_rows = std::max<int64_t>(padded_rows, static_cast<int64_t>(rec[s].max_rows));
    const int64_t limit = cfg.mode == ep_mode::normal ? cfg.max_tokens_per_rank : cap;
    if (recv_rows[s] > limit || static_cast<int64_t>(rec[s].max_rows) > limit)
      return fail(error{errc::malformed_message, "EP: rank " + std::to_string(s) + " announced " +
                                                     std::to_string(rec[s].rows) + " rows, over the " +
                                                     std::to_string(limit) + " this group holds"});
  }

  // Phase 2 (normal, baseline): bulk data, now that every peer has announced it is in
  // this step (and so done reading its receive region from the previous one).
  std::vector<int64_t> expected(n, 0);
  if (cfg.mode == ep_mode::normal) {
    for (int d = 0; d < n; ++d)
      if (auto st = write_chunked(d, staging.data() + d * cfg.max_tokens_per_rank * row_bytes,
                                  send_rows[d] * row_bytes, peers[d].dispatch,
                                  rank * cfg.max_tokens_per_rank * row_bytes, proto::imm_dispatch,
                                  bytes.dispatch_wire, bytes.dispatch_writes);
          !st)
        return st.err();
    for (int s = 0; s < n; ++s) expected[s] = chunks(recv_rows[s] * row_bytes);
  } else if (cfg.mode == ep_mode::baseline) {
    for (int d = 0; d < n; ++d)
      if (auto st = write_chunked(d, staging.data() + d * cap * row_bytes, padded_rows * row_bytes,
                                  peers[d].dispatch, rank * cap * row_bytes, proto::imm_dispatch,
                                  bytes.dispatch_wire, bytes.dispatch_writes);
          !st)
        return st.err();
    for (int s = 0; s < n; ++s) expected[s] = chunks(padded_rows * row_bytes);
  } else {
    for (int s = 0; s < n; ++s) expected[s] = ll_writes(recv_rows[s]);
  }
  if (auto st = wait_for(proto::imm_dispatch, expected, "dispatch data"); !st) return st.err();
  if (cfg.mode == ep_mode::normal) {
    if (hier)
      if (auto st = forward_to_node(); !st) return st.err();
    return normal_output();
  }

  // Low-latency and baseline output: entries in (source, slot) order, which is (source,
  // token, k) order, grouped by local expert.
  const int topk = cfg.topk;
  const int64_t first = static_cast<int64_t>(rank) * le;
  std::vector<int64_t> per_expert(le + 1, 0);
  auto local = [&](int64_t e) -> int64_t { return e >= first && e < first + le ? e - first : -1; };
  auto row_at = [&](int s, int64_t i) -> const char* {
    int64_t base = s * cap;
    if (cfg.mode == ep_mode::low_latency) base += (seq & 1) * n * cap;
    return disp_recv.data() + (base + i) * row_bytes;
  };
  // Pass 1: rows per local expert, and validation of what arrived.
  for (int s = 0; s < n; ++s)
    for (int64_t i = 0; i < recv_rows[s]; ++i) {
      entry_meta m;
      std::memcpy(&m, row_at(s, i) + hidden_bytes, sizeof m);
      if (local(m.expert) < 0 || m.k < 0 || m.k >= topk)
        return fail(error{errc::malformed_message, "EP: an entry from rank " + std::to_string(s) +
                                                       " names expert " + std::to_string(m.expert) +
                                                       " which this rank does not hold"});
      ++per_expert[local(m.expert) + 1];
    }
  const int64_t total = start_output(per_expert);
  // Pass 2: place rows. Visiting (s, i) in order keeps each expert's rows in that order.
  std::vector<int64_t> cursor(per_expert.begin(), per_expert.end() - 1);
  for (int s = 0; s < n; ++s)
    for (int64_t i = 0; i < recv_rows[s]; ++i) {
      const char* row = row_at(s, i);
      entry_meta m;
      std::memcpy(&m, row + hidden_bytes, sizeof m);
      const int64_t r = cursor[local(m.expert)]++;
      std::memcpy(out_x.data() + r * hidden_bytes, row, hidden_bytes);
      out.src_rank[r] = s;
      out.src_token[r] = m.token;
      out.src_k[r] = m.k;
      out_pos[r] = i;
    }
  out.recv_x = out_x.data();
  ph = phase::dispatched;
  return &out;
}

// Gateway role (normal mode across nodes): every row that arrived from another node goes
// once to each rank of this node holding one of its experts, then the same count-first,
// count-the-immediates exchange runs inside the node (immediates flagged `forwarded`).
status ep_group::impl::forward_to_node() {
  const int64_t T = cfg.max_tokens_per_rank, topk = cfg.topk;
  const int my_node = node_of(rank);
  fwd_rows.assign(R, 0);
  gw_slot.assign(static_cast<size_t>(n * T * R), -1);
  for (int s = 0; s < n; ++s) {
    if (node_of(s) == my_node) continue;
    for (int64_t i = 0; i < recv_rows[s]; ++i) {
      const char* row = disp_recv.data() + (s * T + i) * row_bytes;
      const char* meta = row + hidden_bytes;
      for (int l = 0; l < R; ++l) {
        const int64_t lo = static_cast<int64_t>(my_node * R + l) * le;
        bool wanted = false;
        for (int k = 0; k < topk && !wanted; ++k) {
          int32_t e;
          std::memcpy(&e, meta + 8 + 4 * k, 4);
          wanted = e >= lo && e < lo + le;
        }
        if (!wanted) continue;
        if (fwd_rows[l] >= F)
          return fail(error{errc::malformed_message, "EP: more rows to forward than the node holds"});
        const int64_t pos = fwd_rows[l]++;
        std::memcpy(staging.data() + (n * T + l * F + pos) * row_bytes, row, row_bytes);
        gw_slot[(s * T + i) * R + l] = pos;
      }
    }
  }
  auto* rec = reinterpret_cast<count_record*>(ctrl_send.data()) + n;
  for (int l = 0; l < R; ++l) {
    const int d = my_node * R + l;
    rec[l] = count_record{static_cast<uint64_t>(fwd_rows[l]), 0};
    const int64_t off = (2 * n + (seq & 1) * n + rank) * static_cast<int64_t>(sizeof(count_record));
    if (auto st = write(d, reinterpret_cast<const char*>(&rec[l]), sizeof(count_record), peers[d].ctrl, off,
                        proto::imm_count, bytes.dispatch_wire, bytes.dispatch_writes, 1);
        !st)
      return st;
  }
  for (int l = 0; l < R; ++l) {
    const int d = my_node * R + l;
    if (auto st = write_chunked(d, staging.data() + (n * T + l * F) * row_bytes, fwd_rows[l] * row_bytes,
                                peers[d].dispatch, (n * T + local_of(rank) * F) * row_bytes, proto::imm_dispatch,
                                bytes.dispatch_wire, bytes.dispatch_writes, 1);
        !st)
      return st;
  }
  std::vector<int64_t> expected(n, 0);
  for (int l = 0; l < R; ++l) expected[my_node * R + l] = 1;
  if (auto st = wait_for(proto::imm_count, expected, "forwarded count exchange", 1); !st) return st;
  const auto* got = reinterpret_cast<const count_record*>(ctrl_recv.data() + (2 * n + (seq & 1) * n) * sizeof(count_record));
  fwd_recv_rows.assign(R, 0);
  std::fill(expected.begin(), expected.end(), 0);
  for (int l = 0; l < R; ++l) {
    const int q = my_node * R + l;
    fwd_recv_rows[l] = static_cast<int64_t>(got[q].rows);
    if (fwd_recv_rows[l] > F)
      return fail(error{errc::malformed_message, "EP: gateway " + std::to_string(q) + " announced " +
                                                     std::to_string(fwd_recv_rows[l]) + " forwarded rows, over " +
                                                     std::to_string(F)});
    expected[q] = chunks(fwd_recv_rows[l] * row_bytes);
  }
  return wait_for(proto::imm_dispatch, expected, "forwarded data", 1);
}

// Normal mode's expert-major output: every token row that is ours (sent directly by a rank
// of our node, or forwarded by one of its gateways), in (source rank, token) order, fanned
// out to each local expert it names.
result<const dispatch_output*> ep_group::impl::normal_output() {
  const int64_t T = cfg.max_tokens_per_rank;
  const int topk = cfg.topk;
  const int64_t first = static_cast<int64_t>(rank) * le;
  auto local = [&](int64_t e) -> int64_t { return e >= first && e < first + le ? e - first : -1; };
  auto meta_of = [&](int64_t row) { return disp_recv.data() + row * row_bytes + hidden_bytes; };
  std::vector<int64_t> rows;  // receive-region row indices
  for (int s = 0; s < n; ++s) {
    if (hier && node_of(s) != node_of(rank)) continue;  // inter-node rows: forwarded, not ours
    for (int64_t i = 0; i < recv_rows[s]; ++i) rows.push_back(s * T + i);
  }
  if (hier) {
    for (int l = 0; l < R; ++l)
      for (int64_t p = 0; p < fwd_recv_rows[l]; ++p) rows.push_back(n * T + l * F + p);
    auto key = [&](int64_t row) {
      int32_t token, source;
      std::memcpy(&token, meta_of(row), 4);
      std::memcpy(&source, meta_of(row) + 4, 4);
      return std::make_pair(source, token);
    };
    std::stable_sort(rows.begin(), rows.end(), [&](int64_t a, int64_t b) { return key(a) < key(b); });
  }
  std::vector<int64_t> per_expert(le + 1, 0);
  for (int64_t row : rows) {
    const char* meta = meta_of(row);
    bool any = false;
    for (int k = 0; k < topk; ++k) {
      int32_t e;
      std::memcpy(&e, meta + 8 + 4 * k, 4);
      if (local(e) >= 0) {
        ++per_expert[local(e) + 1];
        any = true;
      }
    }
    int32_t source;
    std::memcpy(&source, meta + 4, 4);
    if (!any || source < 0 || source >= n)
      return fail(error{errc::malformed_message, "EP: a received row names no expert of this rank or no valid source"});
  }
  const int64_t total = start_output(per_expert);
  recv_slot.assign(static_cast<size_t>((n * T + R * F) * topk), -1);
  recv_w.assign(recv_slot.size(), 0.0f);
  std::vector<int64_t> cursor(per_expert.begin(), per_expert.end() - 1);
  for (int64_t row : rows) {
    const char* payload = disp_recv.data() + row * row_bytes;
    const char* meta = payload + hidden_bytes;
    int32_t token, source;
    std::memcpy(&token, meta, 4);
    std::memcpy(&source, meta + 4, 4);
    for (int k = 0; k < topk; ++k) {
      int32_t e;
      std::memcpy(&e, meta + 8 + 4 * k, 4);
      if (local(e) < 0) continue;
      const int64_t r = cursor[local(e)]++;
      std::memcpy(out_x.data() + r * hidden_bytes, payload, hidden_bytes);
      out.src_rank[r] = source;
      out.src_token[r] = token;
      out.src_k[r] = k;
      out_pos[r] = row;
      recv_slot[row * topk + k] = r;
      std::memcpy(&recv_w[row * topk + k], meta + 8 + 4 * topk + 4 * k, 4);
    }
  }
  out.recv_x = out_x.data();
  ph = phase::dispatched;
  return &out;
}

// ---- combine --------------------------------------------------------------------------

status ep_group::impl::combine_send(const dispatch_output& handle, const void* expert_out) {
  if (auto st = check_usable(); !st) return st;
  if (ph != phase::dispatched || handle.seq != seq || &handle != &out)
    return error{errc::invalid_argument, "combine_send: handle is not this group's latest dispatch"};
  if (handle.num_recv_rows > 0 && !expert_out)
    return error{errc::invalid_argument, "combine_send: null expert_out"};
  deadline = now_ns() + cfg.op_timeout_ms * 1000000;
  const char* eo = static_cast<const char*>(expert_out);
  const int64_t T = cfg.max_tokens_per_rank;
  if (cfg.mode == ep_mode::normal) {
    // Reduce on this rank: one partial row per received token, sum over its local experts
    // in k order (kernels' combine), then back to whoever sent the token, in its order.
    auto reduce = [&](const void* in, const int64_t* slot, const float* w, int64_t rows, int width,
                      int64_t in_rows, char* dst) -> status {
      return cfg.dtype == ep_dtype::bf16
                 ? kernels::combine_forward(pool, static_cast<const kernels::bf16*>(in), slot, w, rows, width,
                                            cfg.hidden, in_rows, reinterpret_cast<kernels::bf16*>(dst))
                 : kernels::combine_forward(pool, static_cast<const float*>(in), slot, w, rows, width, cfg.hidden,
                                            in_rows, reinterpret_cast<float*>(dst));
    };
    const int topk = cfg.topk;
    for (int s = 0; s < n; ++s) {
      if (recv_rows[s] == 0 || (hier && node_of(s) != node_of(rank))) continue;
      char* dst = staging.data() + s * T * hidden_bytes;
      if (auto st = reduce(eo, recv_slot.data() + s * T * topk, recv_w.data() + s * T * topk, recv_rows[s],
                           topk, out.num_recv_rows, dst);
          !st)
        return st;
      if (auto w2 = write_chunked(s, dst, recv_rows[s] * hidden_bytes, peers[s].combine,
                                  rank * T * hidden_bytes, proto::imm_combine, bytes.combine_wire,
                                  bytes.combine_writes);
          !w2)
        return w2;
    }
    if (hier) {
      // Partials of forwarded tokens go back to the gateway that forwarded them ...
      const int my_node = node_of(rank);
      for (int l = 0; l < R; ++l) {
        if (fwd_recv_rows[l] == 0) continue;
        const int64_t base = n * T + l * F;
        char* dst = staging.data() + base * hidden_bytes;
        if (auto st = reduce(eo, recv_slot.data() + base * topk, recv_w.data() + base * topk, fwd_recv_rows[l],
                             topk, out.num_recv_rows, dst);
            !st)
          return st;
        if (auto w2 = write_chunked(my_node * R + l, dst, fwd_recv_rows[l] * hidden_bytes,
                                    peers[my_node * R + l].combine, (n * T + local_of(rank) * F) * hidden_bytes,
                                    proto::imm_combine, bytes.combine_wire, bytes.combine_writes, 1);
            !w2)
          return w2;
      }
      // ... which sums them in rank order into one partial per (token, node) for the source.
      std::vector<int64_t> expected(n, 0);
      for (int l = 0; l < R; ++l) expected[my_node * R + l] = chunks(fwd_rows[l] * hidden_bytes);
      if (auto st = wait_for(proto::imm_combine, expected, "forwarded partials", 1); !st) return st;
      const int64_t region_rows = n * T + R * F;
      for (int s = 0; s < n; ++s) {
        if (node_of(s) == my_node || recv_rows[s] == 0) continue;
        std::vector<int64_t> slot(static_cast<size_t>(recv_rows[s] * R), -1);
        for (int64_t i = 0; i < recv_rows[s]; ++i)
          for (int l = 0; l < R; ++l) {
            const int64_t pos = gw_slot[(s * T + i) * R + l];
            if (pos >= 0) slot[i * R + l] = n * T + l * F + pos;
          }
        const std::vector<float> ones(slot.size(), 1.0f);
        char* dst = staging.data() + s * T * hidden_bytes;
        if (auto st = reduce(comb_recv.data(), slot.data(), ones.data(), recv_rows[s], R, region_rows, dst); !st)
          return st;
        if (auto w2 = write_chunked(s, dst, recv_rows[s] * hidden_bytes, peers[s].combine, rank * T * hidden_bytes,
                                    proto::imm_combine, bytes.combine_wire, bytes.combine_writes);
            !w2)
          return w2;
      }
    }
  } else if (cfg.mode == ep_mode::low_latency) {
    // Each expert output row straight back into the slot its entry came from at the
    // source (ll_entries_per_write adjacent slots per write).
    for (int64_t r = 0; r < out.num_recv_rows; ++r)
      std::memcpy(staging.data() + (out.src_rank[r] * cap + out_pos[r]) * hidden_bytes,
                  eo + r * hidden_bytes, hidden_bytes);
    const int64_t b = cfg.ll_entries_per_write;
    for (int s = 0; s < n; ++s)
      for (int64_t i = 0; i < recv_rows[s]; i += b)
        if (auto st = write(s, staging.data() + (s * cap + i) * hidden_bytes,
                            std::min(b, recv_rows[s] - i) * hidden_bytes, peers[s].combine,
                            (rank * cap + i) * hidden_bytes, proto::imm_combine, bytes.combine_wire,
                            bytes.combine_writes);
            !st)
          return st;
  } else {
    // Padded blocks back: block for s holds the outputs in the order s sent the entries.
    for (int64_t r = 0; r < out.num_recv_rows; ++r)
      std::memcpy(staging.data() + (out.src_rank[r] * cap + out_pos[r]) * hidden_bytes,
                  eo + r * hidden_bytes, hidden_bytes);
    for (int s = 0; s < n; ++s)
      if (auto st = write_chunked(s, staging.data() + s * cap * hidden_bytes, padded_rows * hidden_bytes,
                                  peers[s].combine, rank * cap * hidden_bytes, proto::imm_combine,
                                  bytes.combine_wire, bytes.combine_writes);
          !st)
        return st;
  }
  ph = phase::combine_sent;
  return {};
}

status ep_group::impl::combine_recv(void* y) {
  if (auto st = check_usable(); !st) return st;
  if (ph != phase::combine_sent) return error{errc::invalid_argument, "combine_recv without combine_send"};
  if (num_tokens > 0 && !y) return error{errc::invalid_argument, "combine_recv: null y"};
  const int topk = cfg.topk;
  const int64_t T = cfg.max_tokens_per_rank;
  std::vector<int64_t> expected(n, 0);
  for (int d = 0; d < n; ++d) {
    switch (cfg.mode) {
      case ep_mode::normal: expected[d] = chunks(send_rows[d] * hidden_bytes); break;
      case ep_mode::low_latency: expected[d] = ll_writes(send_rows[d]); break;
      case ep_mode::baseline: expected[d] = chunks(padded_rows * hidden_bytes); break;
    }
  }
  if (auto st = wait_for(proto::imm_combine, expected, "combine data"); !st) return st;

  // slot[t, j] names the row of comb_recv holding term j of token t's sum.
  std::vector<int64_t> slot;
  std::vector<float> ones;
  const float* w = topk_w;
  int width = topk;
  int64_t rows = 0;
  if (cfg.mode == ep_mode::normal) {
    width = n;  // one partial per rank, summed in rank order with weight 1 (exact)
    slot.assign(static_cast<size_t>(num_tokens * n), -1);
    for (int64_t tk = 0; tk < num_tokens; ++tk)
      for (int d = 0; d < n; ++d) {
        const int64_t i = dest_slot[tk * n + d];
        if (i >= 0) slot[tk * n + d] = d * T + i;
      }
    ones.assign(slot.size(), 1.0f);
    w = ones.data();
    rows = n * T;
  } else {
    slot.assign(static_cast<size_t>(num_tokens * topk), -1);
    for (int64_t tk = 0; tk < num_tokens; ++tk)
      for (int k = 0; k < topk; ++k) {
        const int64_t e = topk_idx[tk * topk + k];
        if (e < 0) continue;
        slot[tk * topk + k] = (e / le) * cap + entry_slot[tk * topk + k];
      }
    rows = n * cap;
  }
  status st = {};
  if (num_tokens > 0) {
    st = cfg.dtype == ep_dtype::bf16
             ? kernels::combine_forward(pool, reinterpret_cast<const kernels::bf16*>(comb_recv.data()),
                                        slot.data(), w, num_tokens, width, cfg.hidden, rows,
                                        static_cast<kernels::bf16*>(y))
             : kernels::combine_forward(pool, reinterpret_cast<const float*>(comb_recv.data()), slot.data(),
                                        w, num_tokens, width, cfg.hidden, rows, static_cast<float*>(y));
  }
  ph = phase::idle;
  return st;
}

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
status ep_group::combine(const dispatch_output& handle, const void* expert_out, void* y) {
  if (auto st = combine_send(handle, expert_out); !st) return st;
  return combine_recv(y);
}

}  // namespace moerl::fabric
