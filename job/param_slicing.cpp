#include "job/param_slicing.h"

#include <algorithm>

#include "policy/adam.h"

namespace moerl::job {
namespace {

enum class share { dense, expert_block };

// How a rank's tensor relates to the full tensor of the same name.
result<share> classify(const policy::tensor_spec& full, const policy::tensor_spec& mine,
                       int num_ranks) {
  if (full.dims == mine.dims) return share::dense;
  const bool same_tail = full.dims.size() == mine.dims.size() && !full.dims.empty() &&
                         std::equal(full.dims.begin() + 1, full.dims.end(), mine.dims.begin() + 1);
  if (same_tail && mine.dims[0] * num_ranks == full.dims[0]) return share::expert_block;
  return error{errc::invalid_argument,
               "tensor " + mine.name + " of a rank's layout is neither the full tensor nor a " +
                   std::to_string(num_ranks) + "-way split of its leading dimension"};
}

status check_sizes(const policy::param_layout& layout, size_t n, const char* what) {
  if (layout.num_floats() != n)
    return error{errc::invalid_argument, std::string(what) + " holds " + std::to_string(n) +
                                             " floats, its layout " +
                                             std::to_string(layout.num_floats())};
  return ok_status();
}

}  // namespace

result<std::vector<float>> slice_params(const policy::param_layout& full_layout,
                                        const std::vector<float>& full,
                                        const policy::param_layout& rank_layout, int rank,
                                        int num_ranks) {
  if (num_ranks < 1 || rank < 0 || rank >= num_ranks)
    return error{errc::invalid_argument,
                 "rank " + std::to_string(rank) + " of " + std::to_string(num_ranks)};
  if (auto st = check_sizes(full_layout, full.size(), "the full parameter set"); !st)
    return st.err();
  std::vector<float> out(rank_layout.num_floats());
  for (const auto& mine : rank_layout.tensors()) {
    const policy::tensor_spec* f = full_layout.find(mine.name);
    if (!f)
      return error{errc::invalid_argument, "the full parameter set has no tensor " + mine.name};
    auto kind = classify(*f, mine, num_ranks);
    if (!kind) return kind.err();
    // An expert block is contiguous in the full tensor: rows of the leading dimension.
    const size_t first = *kind == share::dense ? 0 : size_t(rank) * mine.size();
    std::copy_n(full.begin() + f->offset + first, mine.size(), out.begin() + mine.offset);
  }
  return out;
}

result<std::vector<float>> assemble_params(const policy::param_layout& full_layout,
                                           const policy::param_layout& rank_layout,
                                           const std::vector<std::vector<float>>& rank_params) {
  const int num_ranks = static_cast<int>(rank_params.size());
  if (num_ranks < 1) return error{errc::invalid_argument, "no rank parameters to assemble"};
  for (const auto& p : rank_params)
    if (auto st = check_sizes(rank_layout, p.size(), "a rank's parameter share"); !st)
      return st.err();
  std::vector<float> out(full_layout.num_floats());
  size_t covered = 0;
  for (const auto& mine : rank_layout.tensors()) {
    const policy::tensor_spec* f = full_layout.find(mine.name);
    if (!f) return error{errc::invalid_argument, "the full layout has no tensor " + mine.name};
    auto kind = classify(*f, mine, num_ranks);
    if (!kind) return kind.err();
    if (*kind == share::dense) {
      std::copy_n(rank_params[0].begin() + mine.offset, mine.size(), out.begin() + f->offset);
    } else {
      for (int r = 0; r < num_ranks; ++r)
        std::copy_n(rank_params[r].begin() + mine.offset, mine.size(),
                    out.begin() + f->offset + size_t(r) * mine.size());
    }
    covered += f->size();
  }
  if (covered != full_layout.num_floats())
    return error{errc::invalid_argument, "the rank layout covers " + std::to_string(covered) +
                                             " of the full layout's " +
                                             std::to_string(full_layout.num_floats()) + " floats"};
  return out;
}

result<std::vector<std::pair<size_t, size_t>>> dense_ranges(const policy::param_layout& full_layout,
                                                            const policy::param_layout& rank_layout,
                                                            int num_ranks) {
  std::vector<std::pair<size_t, size_t>> out;
  for (const auto& mine : rank_layout.tensors()) {
    const policy::tensor_spec* f = full_layout.find(mine.name);
    if (!f) return error{errc::invalid_argument, "the full layout has no tensor " + mine.name};
    auto kind = classify(*f, mine, num_ranks);
    if (!kind) return kind.err();
    if (*kind == share::dense) out.emplace_back(mine.offset, mine.size());
  }
  return out;
}

std::vector<std::pair<size_t, size_t>> expert_ranges(
    const std::vector<std::pair<size_t, size_t>>& dense, size_t count) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t next = 0;
  for (const auto& [off, len] : dense) {
    if (off > next) out.emplace_back(next, off - next);
    next = off + len;
  }
  if (count > next) out.emplace_back(next, count - next);
  return out;
}

namespace {

// The MOERLADM format is policy/adam.h's: one codec reads and writes it everywhere.
using policy::adam_state;

result<adam_state> parse_adam(const std::string& b) { return policy::read_adam_state(b); }

std::string write_adam(const adam_state& s) { return policy::write_adam_state(s.steps, s.m, s.v); }

}  // namespace

result<std::string> slice_adam_state(const std::string& full_bytes,
                                     const policy::param_layout& full_layout,
                                     const policy::param_layout& rank_layout, int rank,
                                     int num_ranks) {
  auto full = parse_adam(full_bytes);
  if (!full) return full.err();
  adam_state mine;
  mine.steps = full->steps;
  auto m = slice_params(full_layout, full->m, rank_layout, rank, num_ranks);
  if (!m) return error{m.err().code, "Adam first moments: " + m.err().message};
  auto v = slice_params(full_layout, full->v, rank_layout, rank, num_ranks);
  if (!v) return error{v.err().code, "Adam second moments: " + v.err().message};
  mine.m = std::move(*m);
  mine.v = std::move(*v);
  return write_adam(mine);
}

result<std::string> assemble_adam_state(const std::vector<std::string>& rank_bytes,
                                        const policy::param_layout& full_layout,
                                        const policy::param_layout& rank_layout) {
  std::vector<std::vector<float>> ms, vs;
  uint64_t steps = 0;
  for (size_t r = 0; r < rank_bytes.size(); ++r) {
    auto s = parse_adam(rank_bytes[r]);
    if (!s) return error{s.err().code, "rank " + std::to_string(r) + ": " + s.err().message};
    if (r > 0 && s->steps != steps)
      return error{errc::internal, "Adam step counts differ between trainer ranks"};
    steps = s->steps;
    ms.push_back(std::move(s->m));
    vs.push_back(std::move(s->v));
  }
  adam_state full;
  full.steps = steps;
  auto m = assemble_params(full_layout, rank_layout, ms);
  if (!m) return m.err();
  auto v = assemble_params(full_layout, rank_layout, vs);
  if (!v) return v.err();
  full.m = std::move(*m);
  full.v = std::move(*v);
  return write_adam(full);
}

}  // namespace moerl::job
