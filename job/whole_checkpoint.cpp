#include "job/whole_checkpoint.h"

#include "job/param_slicing.h"

namespace moerl::job {

result<whole_state> assemble_whole_state(const std::vector<store::checkpoint_part>& parts,
                                         int num_ranks, const policy::param_layout& full_layout) {
  if (num_ranks < 1)
    return error{errc::malformed_message,
                 "checkpoint meta names " + std::to_string(num_ranks) + " ranks"};
  std::vector<std::string> params(num_ranks), adam(num_ranks);
  std::vector<bool> seen_params(num_ranks, false), seen_adam(num_ranks, false);
  for (const auto& p : parts) {
    // "shard-0001/rank-3/params": the shard does not matter here, the rank does.
    const size_t at = p.name.find("/rank-");
    if (at == std::string::npos) continue;
    const std::string rest = p.name.substr(at + 6);
    const size_t slash = rest.find('/');
    const int r = slash == std::string::npos ? -1 : std::atoi(rest.substr(0, slash).c_str());
    const std::string what = slash == std::string::npos ? "" : rest.substr(slash + 1);
    if (r < 0 || r >= num_ranks || (what != "params" && what != "adam"))
      return error{errc::malformed_message, "checkpoint part '" + p.name +
                                                "' names no rank below " +
                                                std::to_string(num_ranks) + " with params or adam"};
    (what == "params" ? params : adam)[r] = p.bytes;
    (what == "params" ? seen_params : seen_adam)[r] = true;
  }
  for (int r = 0; r < num_ranks; ++r)
    if (!seen_params[r] || !seen_adam[r])
      return error{errc::malformed_message, "checkpoint has no rank-" + std::to_string(r) + "/" +
                                                (seen_params[r] ? "adam" : "params")};
  policy::param_layout rank_layout;
  if (auto first = policy::deserialize_params(params[0], nullptr, &rank_layout); !first)
    return error{first.err().code, "rank-0/params: " + first.err().message};
  std::vector<std::vector<float>> shares;
  for (int r = 0; r < num_ranks; ++r) {
    auto f = policy::deserialize_params(params[r], &rank_layout);
    if (!f) return error{f.err().code, "rank-" + std::to_string(r) + "/params: " + f.err().message};
    shares.push_back(std::move(*f));
  }
  auto full = assemble_params(full_layout, rank_layout, shares);
  if (!full) return full.err();
  auto moments = assemble_adam_state(adam, full_layout, rank_layout);
  if (!moments) return moments.err();
  return whole_state{policy::serialize_params(full_layout, *full), std::move(*moments)};
}

}  // namespace moerl::job
