#include "fabric/collectives.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "common/config.h"
#include "common/status_try.h"
#include "fabric/internal/nccl_backend.h"
#include "kernels/dtypes.h"

namespace moerl::fabric {
namespace {

// Collective immediates (their own endpoint, so their own layout):
//   bits 31..28 round number mod 16, bits 27..14 ring step, bits 13..0 zero.
// A rank cannot finish a round before every rank contributed to it (ring), or before every
// receiver has copied the round's data out (broadcast: receivers acknowledge to the root, and
// wait for the root's release, sent once every acknowledgement is in; gather: senders wait for
// the root's release, sent once it has copied every sender's data), so ranks are at most
// one round apart and the receive region is double-buffered by round parity.
// Without the release a receiver finished a broadcast as soon as its own data arrived, and
// broadcasts from changing roots let a rank run ahead: with 4 ranks and roots 1, 2, 3 in turn
// (a trainer group's share exchange), rank 3 could write round R+2 into rank 0's slot of
// round R before rank 0 had copied it, and rank 0 took rank 3's bytes for rank 1's (a
// 4-member sharded-state test failed once in CI, 7 Dec; collectives_test reproduces it).
constexpr uint32_t make_imm(uint32_t round, uint32_t step) {
  return ((round % 16) << 28) | (step << 14);
}

struct unmap {
  size_t size;
  void operator()(char* p) const { ::munmap(p, size); }
};

size_t elt_size(coll_dtype d) { return d == coll_dtype::fp32 ? 4 : 2; }

}  // namespace

void apply_config(const config& node_config, collective_config& cfg) {
  cfg.op_timeout_ms = node_config.get_int("fabric.op_timeout_ms");
}

struct collective_group::impl {
  collective_config cfg;
  int rank = 0, n = 1;
  size_t half_bytes = 0;  // one parity of the receive region
  size_t seg_cap = 0;     // bytes of one ring slot
  std::unique_ptr<char, unmap> work{nullptr, unmap{0}}, recv{nullptr, unmap{0}};
  local_region work_reg, recv_reg;
  std::vector<remote_region> peer_recv;
  std::unique_ptr<transport> t;  // after the buffers: closes before they are unmapped
  std::unique_ptr<nccl_backend> nccl;
  std::shared_ptr<const std::atomic<bool>> abort;  // transport_options::abort
  uint32_t round = 0;
  int64_t deadline = 0;
  std::map<uint32_t, int64_t> seen;  // immediates received, by value
  std::vector<uint32_t> imms;
  bool is_broken = false;
  error broken;
  const char* backend = "ring-libfabric";

  error fail(error e) {
    if (!is_broken) {
      is_broken = true;
      broken = e;
    }
    return e;
  }
  // A call may go ahead: the group is not broken and `root` is one of its ranks.
  status callable(const char* op, int root) const {
    if (is_broken)
      return error{broken.code, "collective group unusable after earlier error: " + broken.message};
    if (root < 0 || root >= n)
      return error{errc::invalid_argument,
                   std::string(op) + ": root " + std::to_string(root) + " outside the group"};
    return {};
  }
  int64_t chunks(size_t bytes) const {
    return bytes == 0 ? 0 : static_cast<int64_t>((bytes + cfg.chunk_bytes - 1) / cfg.chunk_bytes);
  }
  // Waits until `want` immediates equal to `imm` arrived and our writes completed locally.
  status wait(uint32_t imm, int64_t want, const char* what) {
    for (;;) {
      if (seen[imm] >= want && t->outstanding() == 0) break;
      imms.clear();
      if (auto st = t->progress(imms); !st) return fail(st.err());
      for (uint32_t v : imms) ++seen[v];
      // Members may outnumber cores (a dev box, the default moerl up): sleep on the
      // transport's doorbell (a same-host peer rings it with its writes) instead of spinning
      // through sched_yield, which was ~15% of a trainer member's CPU. The EP group waits so.
      if (imms.empty()) t->idle_wait(std::clamp<int64_t>(deadline - fabric::now_ns(), 0, 1000000));
      if (abort && abort->load(std::memory_order_acquire))
        return fail(error{errc::peer_dead, std::string("collective round ") +
                                               std::to_string(round) + ": " + what +
                                               " aborted (a member of the group was lost)"});
      if (fabric::now_ns() > deadline)
        return fail(error{errc::timeout, std::string("collective round ") + std::to_string(round) +
                                             ": " + what + " incomplete after " +
                                             std::to_string(cfg.op_timeout_ms) + " ms (" +
                                             std::to_string(seen[imm]) + "/" +
                                             std::to_string(want) + " writes arrived)"});
    }
    if (seen[imm] != want)
      return fail(error{errc::malformed_message,
                        std::string("collective: more writes than expected in ") + what});
    seen.erase(imm);
    return {};
  }
  status write(int peer, const char* src, size_t len, size_t dst_off, uint32_t imm) {
    for (size_t done = 0; done < len; done += cfg.chunk_bytes) {
      const size_t c = std::min(cfg.chunk_bytes, len - done);
      if (auto st = t->write(peer, work_reg, src + done, c, peer_recv[peer], dst_off + done, imm,
                             deadline);
          !st)
        return fail(st.err());
    }
    return {};
  }
  char* slot(size_t parity, size_t index) {
    return recv.get() + parity * half_bytes + index * seg_cap;
  }

  status ring_round(char* data, size_t count, coll_dtype dt);
  status broadcast_round(char* data, size_t bytes, int root);
  status gather_round(const char* data, size_t bytes, char* out, size_t out_stride, int root);
  status release(int root, size_t parity, uint32_t release_imm);
};

result<std::unique_ptr<collective_group>> collective_group::create(const transport_options& topt,
                                                                   bootstrap& boot,
                                                                   const std::vector<int>& members,
                                                                   const collective_config& cfg) {
  auto pos = std::find(members.begin(), members.end(), boot.rank());
  if (pos == members.end())
    return error{errc::invalid_argument, "collective members do not include this rank"};
  if (cfg.max_bytes < 4096 || cfg.chunk_bytes < 64 || cfg.op_timeout_ms < 1)
    return error{errc::invalid_argument,
                 "collective config: max_bytes >= 4096, chunk_bytes >= 64, op_timeout_ms >= 1"};
  auto p = std::make_unique<impl>();
  p->cfg = cfg;
  p->n = static_cast<int>(members.size());
  p->rank = static_cast<int>(pos - members.begin());
  if (p->n > 8192)
    return error{errc::invalid_argument, "collective groups hold at most 8192 ranks"};
  // Ring slots: 2(n-1) steps of one segment (max_bytes / n, rounded up to 64 bytes).
  p->seg_cap = (cfg.max_bytes / p->n + 64 + 63) / 64 * 64;
  p->half_bytes =
      std::max(cfg.max_bytes + 64, 2 * static_cast<size_t>(std::max(p->n - 1, 1)) * p->seg_cap);
  auto map = [](size_t size) -> char* {
    void* m = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return m == MAP_FAILED ? nullptr : static_cast<char*>(m);
  };
  const size_t work_bytes = cfg.max_bytes + 64;
  p->work = std::unique_ptr<char, unmap>(map(work_bytes), unmap{work_bytes});
  p->recv = std::unique_ptr<char, unmap>(map(2 * p->half_bytes), unmap{2 * p->half_bytes});
  if (!p->work || !p->recv) return error{errc::capacity_exceeded, "collective: cannot map buffers"};
  ASSIGN_OR_RETURN(auto tr, open_transport(topt));
  p->t = std::move(tr);
  p->abort = topt.abort;
  ASSIGN_OR_RETURN(auto w, p->t->register_memory(p->work.get(), work_bytes));
  p->work_reg = w;
  ASSIGN_OR_RETURN(auto r, p->t->register_memory(p->recv.get(), 2 * p->half_bytes));
  p->recv_reg = r;
  std::string mine = p->t->address();
  mine.append(reinterpret_cast<const char*>(&p->recv_reg.remote), sizeof(remote_region));
  ASSIGN_OR_RETURN(auto all, boot.allgather(members, mine, cfg.op_timeout_ms));
  std::vector<std::string> addrs;
  for (const std::string& e : all) {
    if (e.size() <= sizeof(remote_region))
      return error{errc::malformed_message, "collective: short bootstrap record"};
    addrs.push_back(e.substr(0, e.size() - sizeof(remote_region)));
    remote_region rr;
    std::memcpy(&rr, e.data() + e.size() - sizeof(remote_region), sizeof rr);
    p->peer_recv.push_back(rr);
  }
  if (auto st = p->t->set_peers(addrs); !st) return st.err();
  if (cfg.use_nccl && nccl_backend::available()) {
    ASSIGN_OR_RETURN(auto nb, nccl_backend::create(boot, members, p->rank, cfg.op_timeout_ms));
    p->nccl = std::move(nb);
  }
  if (auto b = boot.allgather(members, "", cfg.op_timeout_ms); !b) return b.err();
  return std::unique_ptr<collective_group>(new collective_group(std::move(p)));
}

collective_group::collective_group(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
collective_group::~collective_group() = default;
int collective_group::rank() const { return impl_->rank; }
int collective_group::num_ranks() const { return impl_->n; }
const char* collective_group::last_backend() const { return impl_->backend; }

namespace {

void add_into(char* dst, const char* src, size_t count, coll_dtype dt) {
  if (dt == coll_dtype::fp32) {
    auto* d = reinterpret_cast<float*>(dst);
    const auto* s = reinterpret_cast<const float*>(src);
    for (size_t i = 0; i < count; ++i) d[i] += s[i];
    return;
  }
  for (size_t i = 0; i < count; ++i) {
    kernels::bf16 a, b;
    std::memcpy(&a.bits, dst + 2 * i, 2);
    std::memcpy(&b.bits, src + 2 * i, 2);
    const kernels::bf16 r =
        kernels::float_to_bf16(kernels::bf16_to_float(a) + kernels::bf16_to_float(b));
    std::memcpy(dst + 2 * i, &r.bits, 2);
  }
}

}  // namespace

// One ring all-reduce of count elements (count * elt <= max_bytes) held in `work`.
status collective_group::impl::ring_round(char* data, size_t count, coll_dtype dt) {
  const size_t elt = elt_size(dt);
  ++round;
  deadline = fabric::now_ns() + cfg.op_timeout_ms * 1000000;
  std::memcpy(work.get(), data, count * elt);
  const size_t seg = (count + n - 1) / n;  // elements per segment (the last may be shorter)
  auto first = [&](int s) { return std::min(count, static_cast<size_t>(s) * seg); };
  auto len = [&](int s) { return std::min(count, static_cast<size_t>(s + 1) * seg) - first(s); };
  const int next = (rank + 1) % n, prev = (rank - 1 + n) % n;
  (void)prev;
  const size_t parity = round & 1;
  for (int step = 0; step < 2 * (n - 1); ++step) {
    const bool reducing = step < n - 1;
    const int j = reducing ? step : step - (n - 1);
    const int send_seg = reducing ? (rank - j + n) % n : (rank + 1 - j + n) % n;
    const int recv_seg = reducing ? (rank - j - 1 + 2 * n) % n : (rank - j + n) % n;
    const uint32_t imm = make_imm(round, static_cast<uint32_t>(step));
    if (auto st = write(next, work.get() + first(send_seg) * elt, len(send_seg) * elt,
                        parity * half_bytes + static_cast<size_t>(step) * seg_cap, imm);
        !st)
      return st;
    if (auto st =
            wait(imm, chunks(len(recv_seg) * elt), reducing ? "reduce-scatter" : "all-gather");
        !st)
      return st;
    char* dst = work.get() + first(recv_seg) * elt;
    if (reducing)
      add_into(dst, slot(parity, step), len(recv_seg), dt);
    else
      std::memcpy(dst, slot(parity, step), len(recv_seg) * elt);
  }
  std::memcpy(data, work.get(), count * elt);
  return {};
}

status collective_group::impl::broadcast_round(char* data, size_t bytes, int root) {
  ++round;
  deadline = fabric::now_ns() + cfg.op_timeout_ms * 1000000;
  const size_t parity = round & 1;
  const uint32_t data_imm = make_imm(round, 0), ack_imm = make_imm(round, 1),
                 release_imm = make_imm(round, 2);
  // Acknowledgements land past the data in the slot, as releases do (release()).
  const size_t signal_off = parity * half_bytes + cfg.max_bytes;
  if (rank == root) {
    std::memcpy(work.get(), data, bytes);
    for (int peer = 0; peer < n; ++peer)
      if (peer != root)
        if (auto st = write(peer, work.get(), bytes, parity * half_bytes, data_imm); !st) return st;
    // Every receiver has copied its data out: the round's slots may be written again.
    if (auto st = wait(ack_imm, n - 1, "broadcast acknowledgements"); !st) return st;
    return release(root, parity, release_imm);
  }
  if (auto st = wait(data_imm, chunks(bytes), "broadcast data"); !st) return st;
  std::memcpy(data, recv.get() + parity * half_bytes, bytes);
  if (auto st = write(root, work.get(), 8, signal_off, ack_imm); !st) return st;
  // Not done until every receiver is: the next round (any root) may write into our slots.
  return wait(release_imm, 1, "broadcast release");
}

// The root tells every other rank that the round's slots may be written again. Releases land
// past the data in the slot (their bytes mean nothing): a rank is never root and receiver of
// one round, so the two never meet.
status collective_group::impl::release(int root, size_t parity, uint32_t release_imm) {
  for (int peer = 0; peer < n; ++peer)
    if (peer != root)
      if (auto st = write(peer, work.get(), 8, parity * half_bytes + cfg.max_bytes, release_imm);
          !st)
        return st;
  return wait(release_imm, 0, "release writes");
}

// Rank r writes its `bytes` to the root's slot r; the root copies each to out + r * out_stride
// and releases the senders (without it a sender could write round R+2 into a slot of round R
// that the root has not copied yet: a gather's senders need not wait for anything else).
status collective_group::impl::gather_round(const char* data, size_t bytes, char* out,
                                            size_t out_stride, int root) {
  ++round;
  deadline = fabric::now_ns() + cfg.op_timeout_ms * 1000000;
  const size_t parity = round & 1;
  const uint32_t data_imm = make_imm(round, 0), release_imm = make_imm(round, 2);
  if (rank != root) {
    std::memcpy(work.get(), data, bytes);
    if (auto st = write(root, work.get(), bytes, parity * half_bytes + rank * bytes, data_imm); !st)
      return st;
    return wait(release_imm, 1, "gather release");
  }
  if (auto st = wait(data_imm, (n - 1) * chunks(bytes), "gather data"); !st) return st;
  for (int peer = 0; peer < n; ++peer)
    std::memcpy(out + peer * out_stride,
                peer == root ? data : recv.get() + parity * half_bytes + peer * bytes, bytes);
  return release(root, parity, release_imm);
}

status collective_group::all_reduce_sum(void* data, size_t count, coll_dtype dtype,
                                        memory_kind where) {
  impl& p = *impl_;
  if (auto st = p.callable("all_reduce_sum", 0); !st) return st;
  if (count > 0 && !data) return error{errc::invalid_argument, "all_reduce_sum: null data"};
  if (where == memory_kind::cuda) {
    if (!p.nccl)
      return error{errc::invalid_argument,
                   "all_reduce_sum: GPU buffer but this group has no NCCL communicator"};
    p.backend = "nccl";
    auto st = p.nccl->all_reduce_sum(data, count, dtype == coll_dtype::bf16);
    if (!st) return p.fail(st.err());
    return {};
  }
  p.backend = "ring-libfabric";
  if (p.n == 1) return {};
  const size_t elt = elt_size(dtype);
  const size_t per_round = p.cfg.max_bytes / elt;
  auto* bytes = static_cast<char*>(data);
  for (size_t off = 0; off < count; off += per_round)
    if (auto st = p.ring_round(bytes + off * elt, std::min(per_round, count - off), dtype); !st)
      return st;
  return {};
}

status collective_group::broadcast(void* data, size_t bytes, int root, memory_kind where) {
  impl& p = *impl_;
  if (auto st = p.callable("broadcast", root); !st) return st;
  if (bytes > 0 && !data) return error{errc::invalid_argument, "broadcast: null data"};
  if (where == memory_kind::cuda) {
    if (!p.nccl)
      return error{errc::invalid_argument,
                   "broadcast: GPU buffer but this group has no NCCL communicator"};
    p.backend = "nccl";
    auto st = p.nccl->broadcast(data, bytes, root);
    if (!st) return p.fail(st.err());
    return {};
  }
  p.backend = "ring-libfabric";
  if (p.n == 1) return {};
  auto* b = static_cast<char*>(data);
  for (size_t off = 0; off < bytes; off += p.cfg.max_bytes)
    if (auto st = p.broadcast_round(b + off, std::min(p.cfg.max_bytes, bytes - off), root); !st)
      return st;
  return {};
}

status collective_group::gather(const void* data, size_t bytes, void* out, int root) {
  impl& p = *impl_;
  if (auto st = p.callable("gather", root); !st) return st;
  if (bytes > 0 && (!data || (p.rank == root && !out)))
    return error{errc::invalid_argument, "gather: null data, or null out on the root"};
  // Every rank's piece of a round sits in one parity of the root's receive region.
  const size_t piece = p.cfg.max_bytes / static_cast<size_t>(p.n);
  if (bytes > 0 && piece == 0)
    return error{errc::invalid_argument, "gather: " + std::to_string(p.n) +
                                             " ranks do not fit collective max_bytes " +
                                             std::to_string(p.cfg.max_bytes)};
  p.backend = "ring-libfabric";
  if (p.n == 1) {
    if (bytes > 0) std::memcpy(out, data, bytes);
    return {};
  }
  const auto* in = static_cast<const char*>(data);
  auto* o = static_cast<char*>(out);
  for (size_t off = 0; off < bytes; off += piece)
    if (auto st = p.gather_round(in + off, std::min(piece, bytes - off), o ? o + off : nullptr,
                                 bytes, root);
        !st)
      return st;
  return {};
}

}  // namespace moerl::fabric
