// Shared by the transport tests: every rank publishes its transport's address and some of its
// regions through the bootstrap, installs the peers, and gets every rank's regions back.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "fabric/bootstrap.h"
#include "fabric/transport.h"

namespace moerl::fabric::test {

// regions_of[r][i]: region i that rank r published (every rank publishes as many).
inline result<std::vector<std::vector<remote_region>>> exchange_regions(
    bootstrap& b, transport& t, const std::vector<remote_region>& mine) {
  std::string record = t.address();
  for (const remote_region& r : mine)
    record.append(reinterpret_cast<const char*>(&r), sizeof(remote_region));
  auto all = b.allgather(all_members(b), record, 10000);
  if (!all) return all.err();
  const size_t tail = mine.size() * sizeof(remote_region);
  std::vector<std::string> addresses;
  std::vector<std::vector<remote_region>> regions_of;
  for (const std::string& e : *all) {
    if (e.size() < tail) return error{errc::malformed_message, "a rank's record is short"};
    addresses.push_back(e.substr(0, e.size() - tail));
    std::vector<remote_region> rs(mine.size());
    for (size_t i = 0; i < rs.size(); ++i)
      std::memcpy(&rs[i], e.data() + e.size() - tail + i * sizeof(remote_region),
                  sizeof(remote_region));
    regions_of.push_back(std::move(rs));
  }
  if (auto st = t.set_peers(addresses); !st) return st.err();
  return regions_of;
}

}  // namespace moerl::fabric::test
