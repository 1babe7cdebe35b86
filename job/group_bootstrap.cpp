#include "job/group_bootstrap.h"

namespace moerl::job {
namespace {

class group_bootstrap final : public fabric::bootstrap {
 public:
  group_bootstrap(actors::trainer_group& g, int rank) : g_(g), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(g_.num_members() * g_.ranks_per_member()); }
  result<std::vector<std::string>> allgather(const std::vector<int>& members,
                                             const std::string& mine, int64_t timeout_ms) override {
    return g_.allgather("fabric", members, rank_, mine, timeout_ms);
  }

 private:
  actors::trainer_group& g_;
  const int rank_;
};

// The launched process's bootstrap, lent to a rank thread (which must not own it).
class lent_bootstrap final : public fabric::bootstrap {
 public:
  explicit lent_bootstrap(fabric::bootstrap& b) : b_(b) {}
  int rank() const override { return b_.rank(); }
  int size() const override { return b_.size(); }
  result<std::vector<std::string>> allgather(const std::vector<int>& m, const std::string& mine,
                                             int64_t t) override {
    return b_.allgather(m, mine, t);
  }

 private:
  fabric::bootstrap& b_;
};

}  // namespace

ep_trainer_span launched_process_span(fabric::bootstrap& boot) {
  ep_trainer_span s;
  s.member_index = boot.rank();
  s.num_members = boot.size();
  s.ranks_per_member = 1;
  s.make_bootstrap = [&boot](int) { return std::make_unique<lent_bootstrap>(boot); };
  s.members_allgather = [&boot](const std::string& mine, int64_t t) {
    return boot.allgather(fabric::all_members(boot), mine, t);
  };
  return s;
}

std::unique_ptr<fabric::bootstrap> make_group_bootstrap(actors::trainer_group& group, int rank) {
  return std::make_unique<group_bootstrap>(group, rank);
}

ep_trainer_span trainer_span_of(actors::trainer_group& group) {
  ep_trainer_span s;
  s.member_index = static_cast<int>(group.member_index());
  s.num_members = static_cast<int>(group.num_members());
  s.ranks_per_member = static_cast<int>(group.ranks_per_member());
  s.make_bootstrap = [&group](int rank) { return make_group_bootstrap(group, rank); };
  s.abort = group.abort_flag();
  s.members_allgather = [&group](const std::string& mine, int64_t timeout_ms) {
    return all_members_allgather(group, mine, timeout_ms);
  };
  return s;
}

}  // namespace moerl::job
