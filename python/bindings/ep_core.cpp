#include "python/bindings/ep_core.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <utility>

#include <sys/mman.h>

#include "common/status_try.h"
#include "kernels/dispatch_layout.h"
#include "python/bindings/ep_core_ll_channel.h"
#include "python/bindings/ep_core_scratch.h"

namespace moerl::py {

namespace {

// fabric::bootstrap over the Python side's all-gather (torch.distributed on the user's
// group): the only thing the group carries is these address records.
class callback_bootstrap final : public fabric::bootstrap {
 public:
  callback_bootstrap(int rank, int size, const allgather_fn& fn)
      : rank_(rank), size_(size), fn_(fn) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  result<std::vector<std::string>> allgather(const std::vector<int>& members,
                                             const std::string& mine, int64_t) override {
    if (static_cast<int>(members.size()) != size_)
      return error{errc::internal, "moerl.ep bootstrap: a group must span the whole process group"};
    auto all = fn_(mine);
    if (all && static_cast<int>(all->size()) != size_)
      return error{errc::malformed_message, "moerl.ep bootstrap: all-gather returned " +
                                                std::to_string(all->size()) + " records, not " +
                                                std::to_string(size_)};
    return all;
  }

 private:
  int rank_, size_;
  const allgather_fn& fn_;
};

// Row metadata beyond the payload that a normal-mode row carries (PROTOCOL.md "Buffers"),
// rounded up: enough to size the registered regions.
constexpr int64_t row_overhead_bytes = 64;
// Each channel registers about three [num_ranks][T] row regions (dispatch receive, combine
// receive, send staging).
constexpr int64_t regions_per_channel = 3;
constexpr int64_t max_capacity_tokens = 1 << 16;

// Output slots of a host x channel (fabric::ep_config::output_slots): up to this many - 1
// recv_x tensors can view their step's rows in place at once; past that, recv_x is a copy.
// Unused slots cost address space only (the region's pages are backed when first touched,
// and the lowest free slot is filled first).
constexpr int recv_slots = 4;

// The output slots of a host x channel as recv_x views see them: a second mapping of each slot
// of the group's shared output region (its memfd), so a view stays readable after close()
// destroyed the group (endpoints and all), and which slots a view holds (released when the
// tensor's last view dies, on any thread).
class output_slot_book final : public block_owner {
 public:
  // nullptr: the group's output is not in a shared file (no same-host peer), or mmap failed;
  // recv_x is then a copy.
  static std::shared_ptr<output_slot_book> map(const fabric::ep_group& group, int slots) {
    std::shared_ptr<output_slot_book> book(new output_slot_book());
    for (int s = 0; s < slots; ++s) {
      const fabric::ep_group::slot_file f = group.output_slot_file(s);
      if (f.fd < 0) return nullptr;
      void* p = ::mmap(nullptr, static_cast<size_t>(f.bytes), PROT_READ | PROT_WRITE, MAP_SHARED,
                       f.fd, static_cast<off_t>(f.offset));
      if (p == MAP_FAILED) return nullptr;
      book->maps_.push_back({static_cast<char*>(p), f.bytes});
      book->held_.push_back(false);
    }
    return book;
  }
  ~output_slot_book() override {
    for (const auto& m : maps_) ::munmap(m.first, static_cast<size_t>(m.second));
  }
  char* base(int slot) const { return maps_[static_cast<size_t>(slot)].first; }
  void release(void*, int64_t slot) override {
    std::lock_guard<std::mutex> lock(mu_);
    held_[static_cast<size_t>(slot)] = false;
  }
  // The lowest slot no view holds (one always is: hold() keeps one free).
  int free_slot() {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t s = 0; s < held_.size(); ++s)
      if (!held_[s]) return static_cast<int>(s);
    return -1;
  }
  int held() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(std::count(held_.begin(), held_.end(), true));
  }
  // Marks `slot` held unless it is, or that would leave no slot for the next step.
  bool hold(int slot) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto held = std::count(held_.begin(), held_.end(), true);
    if (held_[static_cast<size_t>(slot)] || held + 1 >= static_cast<std::ptrdiff_t>(held_.size()))
      return false;
    held_[static_cast<size_t>(slot)] = true;
    return true;
  }

 private:
  output_slot_book() = default;
  std::mutex mu_;
  std::vector<std::pair<char*, int64_t>> maps_;
  std::vector<bool> held_;
};

}  // namespace

struct ep_core::channel {
  std::string name;
  std::unique_ptr<fabric::ep_group> group;
  std::shared_ptr<output_slot_book> slots;  // host x channels whose output is shared memory
  int step_slot = 0;                        // the open step's output slot
  int64_t width = 0;
  int64_t row_bytes = 0;
  bool open = false;  // dispatched and not combined yet
  int64_t routing_id = -1;
  int64_t num_tokens = 0;
  const fabric::dispatch_output* out = nullptr;
  std::vector<int64_t> idx;  // the open step's routing, [T, N]: r or -1
  std::vector<float> ones;   // its weights, [T, N]
  payload_scratch scratch;   // where a dropped combine lands
  fabric::memory_kind memory() const { return payload_kind(group->config().memory); }
};

ep_core::ep_core(ep_core_options opt, allgather_fn allgather)
    : opt_(std::move(opt)),
      allgather_(std::move(allgather)),
      pool_(0),
      blocks_(host_block_pool::create(opt_.buffer_bytes)) {}

ep_core::~ep_core() = default;

int64_t ep_core::capacity(int64_t row_bytes) const {
  const int64_t per_token = regions_per_channel * opt_.num_ranks * (row_bytes + row_overhead_bytes);
  return std::min<int64_t>(opt_.buffer_bytes / per_token, max_capacity_tokens);
}

int64_t ep_core::bytes_needed(int64_t num_tokens, int64_t row_bytes) const {
  return num_tokens * regions_per_channel * opt_.num_ranks * (row_bytes + row_overhead_bytes);
}

status ep_core::layout(const int64_t* topk_idx, int64_t num_tokens, int topk, int num_experts,
                       int32_t* num_tokens_per_rank, int32_t* num_tokens_per_expert,
                       uint8_t* is_token_in_rank) {
  std::vector<int64_t> per_rank(opt_.num_ranks), per_expert(num_experts);
  kernels::dispatch_layout_params p;
  p.num_tokens = num_tokens;
  p.topk = topk;
  p.num_experts = num_experts;
  p.num_ranks = opt_.num_ranks;
  kernels::dispatch_layout_out o;
  o.num_tokens_per_rank = per_rank.data();
  o.num_tokens_per_expert = per_expert.data();
  o.is_token_in_rank = is_token_in_rank;
  STATUS_TRY(kernels::get_dispatch_layout(pool_, topk_idx, p, o));
  for (int r = 0; r < opt_.num_ranks; ++r)
    num_tokens_per_rank[r] = static_cast<int32_t>(per_rank[r]);
  for (int e = 0; e < num_experts; ++e)
    num_tokens_per_expert[e] = static_cast<int32_t>(per_expert[e]);
  return {};
}

result<std::unique_ptr<fabric::ep_group>> ep_core::make_group(const fabric::ep_config& cfg_in) {
  fabric::ep_config cfg = cfg_in;
  cfg.op_timeout_ms = opt_.op_timeout_ms;
  callback_bootstrap boot(opt_.rank, opt_.num_ranks, allgather_);
  std::vector<int> members(opt_.num_ranks);
  for (int r = 0; r < opt_.num_ranks; ++r) members[r] = r;
  return fabric::ep_group::create(opt_.transport, boot, members, cfg);
}

void ep_core::close() {
  last_x_ = last_meta_ = nullptr;
  channels_.clear();
  ll_channels_.clear();
  closed_ = true;
}

result<ep_core::channel*> ep_core::channel_for(bool meta, fabric::ep_dtype dtype, int64_t width,
                                               fabric::ep_memory memory) {
  if (closed_) return error{errc::invalid_argument, "moerl.ep: this Buffer was destroyed"};
  const channel_key key{meta, static_cast<int>(dtype), width, static_cast<int>(memory)};
  if (auto it = channels_.find(key); it != channels_.end()) return it->second.get();
  auto c = std::make_unique<channel>();
  c->width = width;
  c->row_bytes = width * static_cast<int64_t>(fabric::ep_dtype_size(dtype));
  c->name =
      std::string(meta ? "topk" : "x") + ":" + (dtype == fabric::ep_dtype::bf16 ? "bf16" : "fp32") +
      ":" + std::to_string(width) +
      (memory == fabric::ep_memory::host ? "" : std::string(":") + fabric::ep_memory_name(memory));
  fabric::ep_config cfg;
  cfg.mode = fabric::ep_mode::normal;
  cfg.memory = memory;
  cfg.num_experts = opt_.num_ranks;
  cfg.topk = opt_.num_ranks;
  cfg.hidden = width;
  cfg.dtype = dtype;
  cfg.max_tokens_per_rank = std::max<int64_t>(capacity(c->row_bytes), 1);
  const bool views = !meta && memory == fabric::ep_memory::host;
  cfg.output_slots = views ? recv_slots : 1;
  auto g = make_group(cfg);
  if (!g)
    return error{g.err().code,
                 "moerl.ep: creating the " + c->name + " channel: " + g.err().message};
  c->group = std::move(*g);
  if (views) c->slots = output_slot_book::map(*c->group, recv_slots);
  channel* raw = c.get();
  channels_.emplace(key, std::move(c));
  return raw;
}

result<std::string> ep_core::device_refusal(const error& e, fabric::ep_memory memory) {
  if (memory == fabric::ep_memory::cuda && e.code == errc::invalid_argument &&
      e.message.find("host staging") != std::string::npos)
    return e.message;
  return e;
}

result<std::string> ep_core::prepare(fabric::ep_dtype dtype, int64_t hidden,
                                     fabric::ep_memory memory) {
  auto c = channel_for(false, dtype, hidden, memory);
  if (c) return std::string();
  return device_refusal(c.err(), memory);
}

status ep_core::close_step(channel& c) {
  if (!c.open) return {};
  c.open = false;
  ASSIGN_OR_RETURN(void* y,
                   c.scratch.get(c.memory(), std::max<int64_t>(c.num_tokens, 1) * c.row_bytes));
  return c.group->combine(*c.out, c.group->combine_buffer(), y);
}

status ep_core::open_step(channel& c, const void* x, const uint8_t* in_rank, int64_t num_tokens,
                          int64_t routing_id) {
  STATUS_TRY(close_step(c));
  const int n = opt_.num_ranks;
  c.idx.resize(static_cast<size_t>(num_tokens * n));
  c.ones.assign(static_cast<size_t>(num_tokens * n), 1.0f);
  for (int64_t i = 0; i < num_tokens * n; ++i) c.idx[i] = in_rank[i] ? i % n : -1;
  if (c.slots) {
    c.step_slot = c.slots->free_slot();
    if (c.step_slot < 0) return error{errc::internal, "moerl.ep: no free output slot"};
    STATUS_TRY(c.group->select_output_slot(c.step_slot));
  }
  ASSIGN_OR_RETURN(c.out, c.group->dispatch(x, c.idx.data(), c.ones.data(), num_tokens));
  c.open = true;
  c.routing_id = routing_id;
  c.num_tokens = num_tokens;
  return {};
}

status ep_core::ensure_routing(channel& c, const uint8_t* in_rank, int64_t num_tokens,
                               int64_t routing_id) {
  if (c.open && c.routing_id == routing_id) return {};
  STATUS_TRY(close_step(c));
  // Replay: the group's own dispatch buffer is zeros (or an old step's tokens); only the
  // routing matters, the rows are never read.
  return open_step(c, c.group->dispatch_buffer(), in_rank, num_tokens, routing_id);
}

result<int64_t> ep_core::dispatch(const void* x, int64_t num_tokens, int64_t hidden,
                                  fabric::ep_dtype dtype, const uint8_t* in_rank,
                                  const int64_t* topk_idx, const float* topk_weights, int topk,
                                  int64_t routing_id, fabric::ep_memory memory) {
  channel* meta = nullptr;
  if (topk > 0) {
    ASSIGN_OR_RETURN(meta, channel_for(true, fabric::ep_dtype::fp32, 3 * int64_t{topk}));
    if (num_tokens > meta->group->config().max_tokens_per_rank)
      return error{errc::capacity_exceeded, "moerl.ep: too many tokens for the buffer"};
    meta_rows_.resize(static_cast<size_t>(std::max<int64_t>(num_tokens, 1) * 3 * topk));
    for (int64_t t = 0; t < num_tokens; ++t) {
      float* row = meta_rows_.data() + t * 3 * topk;
      std::memcpy(row, topk_idx + t * topk, 8 * static_cast<size_t>(topk));
      std::memcpy(row + 2 * topk, topk_weights + t * topk, 4 * static_cast<size_t>(topk));
    }
    STATUS_TRY(open_step(*meta, meta_rows_.data(), in_rank, num_tokens, routing_id));
  }
  ASSIGN_OR_RETURN(channel * xc, channel_for(false, dtype, hidden, memory));
  if (num_tokens > xc->group->config().max_tokens_per_rank)
    return error{errc::capacity_exceeded, "moerl.ep: too many tokens for the buffer"};
  STATUS_TRY(open_step(*xc, x, in_rank, num_tokens, routing_id));
  if (meta && meta->out->num_recv_rows != xc->out->num_recv_rows)
    return error{errc::internal, "moerl.ep: top-k rows and x rows differ in number"};
  last_x_ = xc;
  last_meta_ = meta;
  last_topk_ = topk;
  return xc->out->num_recv_rows;
}

status ep_core::read_dispatch(void* recv_x, int32_t* src_rank, int32_t* src_token,
                              int64_t* recv_topk_idx, float* recv_topk_weights, int num_experts,
                              std::vector<int64_t>& per_local_expert) {
  if (!last_x_ || !last_x_->open)
    return error{errc::invalid_argument, "moerl.ep: no dispatch to read"};
  const fabric::dispatch_output& o = *last_x_->out;
  const int64_t num_rows = o.num_recv_rows;
  if (num_rows > 0 && recv_x)
    STATUS_TRY(fabric::memory_copy(last_x_->memory(), recv_x, o.recv_x,
                                   static_cast<size_t>(num_rows * last_x_->row_bytes)));
  std::copy(o.src_rank.begin(), o.src_rank.end(), src_rank);
  std::copy(o.src_token.begin(), o.src_token.end(), src_token);
  if (!last_meta_) return {};
  const fabric::dispatch_output& m = *last_meta_->out;
  const int k_max = last_topk_;
  const int64_t num_local = num_experts / opt_.num_ranks, first = opt_.rank * num_local;
  per_local_expert.assign(static_cast<size_t>(num_local), 0);
  for (int64_t i = 0; i < num_rows; ++i) {
    // Both channels order rows by (source rank, source token): the same rows, row for row.
    if (m.src_rank[i] != o.src_rank[i] || m.src_token[i] != o.src_token[i])
      return error{errc::internal, "moerl.ep: top-k rows out of step with x rows"};
    const float* row = static_cast<const float*>(m.recv_x) + i * 3 * k_max;
    for (int k = 0; k < k_max; ++k) {
      int64_t e = 0;
      float w = 0;
      std::memcpy(&e, row + 2 * k, 8);
      std::memcpy(&w, row + 2 * k_max + k, 4);
      const int64_t local = e - first;
      const bool here = e >= 0 && local >= 0 && local < num_local;
      recv_topk_idx[i * k_max + k] = here ? local : -1;
      recv_topk_weights[i * k_max + k] = here ? w : 0.0f;
      if (here) ++per_local_expert[static_cast<size_t>(local)];
    }
  }
  return {};
}

status ep_core::combine(const void* x, int64_t num_rows, int64_t hidden, fabric::ep_dtype dtype,
                        const uint8_t* in_rank, int64_t num_tokens, int64_t routing_id, void* y,
                        const float* topk_weights, int topk, float* combined_weights,
                        fabric::ep_memory memory) {
  ASSIGN_OR_RETURN(channel * xc, channel_for(false, dtype, hidden, memory));
  STATUS_TRY(ensure_routing(*xc, in_rank, num_tokens, routing_id));
  if (xc->out->num_recv_rows != num_rows)
    return error{errc::invalid_argument, "moerl.ep: combine x has " + std::to_string(num_rows) +
                                             " rows; the handle's dispatch received " +
                                             std::to_string(xc->out->num_recv_rows)};
  xc->open = false;
  STATUS_TRY(xc->group->combine(*xc->out, x, y));
  if (topk <= 0) return {};
  ASSIGN_OR_RETURN(channel * meta, channel_for(true, fabric::ep_dtype::fp32, 3 * int64_t{topk}));
  STATUS_TRY(ensure_routing(*meta, in_rank, num_tokens, routing_id));
  if (meta->out->num_recv_rows != num_rows)
    return error{errc::internal, "moerl.ep: top-k rows and x rows differ in number"};
  // Rows [ids (zeros here), weights]: the group sums them per token like x.
  meta_rows_.assign(static_cast<size_t>(std::max<int64_t>(num_rows, 1) * 3 * topk), 0.0f);
  for (int64_t i = 0; i < num_rows; ++i)
    std::memcpy(meta_rows_.data() + i * 3 * topk + 2 * topk, topk_weights + i * topk,
                4 * static_cast<size_t>(topk));
  std::vector<float> sums(static_cast<size_t>(std::max<int64_t>(num_tokens, 1) * 3 * topk));
  meta->open = false;
  STATUS_TRY(meta->group->combine(*meta->out, meta_rows_.data(), sums.data()));
  for (int64_t t = 0; t < num_tokens; ++t)
    std::memcpy(combined_weights + t * topk, sums.data() + t * 3 * topk + 2 * topk,
                4 * static_cast<size_t>(topk));
  return {};
}

std::unique_ptr<host_block> ep_core::recv_view() {
  if (!last_x_ || !last_x_->open || !last_x_->slots) return nullptr;
  const fabric::dispatch_output& o = *last_x_->out;
  if (o.num_recv_rows == 0 || !last_x_->slots->hold(last_x_->step_slot)) return nullptr;
  // The same pages as o.recv_x (the start of the slot), through the book's own mapping.
  return std::make_unique<host_block>(last_x_->slots, last_x_->slots->base(last_x_->step_slot),
                                      o.num_recv_rows * last_x_->row_bytes, last_x_->step_slot);
}

int ep_core::recv_views_held() const {
  int n = 0;
  for (const auto& [key, c] : channels_)
    if (c->slots) n += c->slots->held();
  return n;
}

std::vector<ep_core::channel_info> ep_core::describe() const {
  std::vector<channel_info> out;
  for (const auto& [key, c] : channels_) {
    const auto& d = c->group->describe();
    out.push_back({c->name, d.provider, d.peer_paths, d.peer_device_paths, d.reorder_shim,
                   fabric::ep_memory_name(c->group->config().memory)});
  }
  for (const auto& [key, c] : ll_channels_) {
    const auto& d = c->group->describe();
    out.push_back({c->name, d.provider, d.peer_paths, d.peer_device_paths, d.reorder_shim,
                   fabric::ep_memory_name(c->group->config().memory)});
  }
  return out;
}

}  // namespace moerl::py
