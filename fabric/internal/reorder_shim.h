// The reorder shim: a transport that stands between the EP layer and a real endpoint and
// makes shm/tcp (which deliver in order) behave as badly as EFA is allowed to:
//  - splits each write into 1..4 pieces, posted in random order across all pending writes;
//  - delays writes by a random number of progress calls;
//  - re-delivers some pieces (writes the same bytes twice) before the completion;
//  - posts the piece carrying the immediate only after every other piece of its write
//    completed locally, so the peer's completion still means "all bytes placed";
//  - hands received immediates to the caller shuffled and some of them late.
// A protocol that writes "data then flag", polls payload bytes, or assumes a count arrives
// before the data it counts fails under the shim. Private to fabric/.
#pragma once

#if !defined(MOERL_INSIDE_moerl_fabric)
#error \
    "fabric/internal/reorder_shim.h is private to moerl_fabric (fabric/): include its public headers"
#endif

#include <memory>
#include <random>
#include <unordered_map>
#include <vector>

#include "fabric/rdm_endpoint.h"

namespace moerl::fabric {

class reorder_shim final : public transport {
 public:
  reorder_shim(std::unique_ptr<rdm_endpoint> inner, uint64_t seed);

  std::string address() const override { return inner_->address(); }
  status set_peers(const std::vector<std::string>& addresses) override {
    return inner_->set_peers(addresses);
  }
  result<local_region> register_memory(void* ptr, size_t size) override {
    return inner_->register_memory(ptr, size);
  }
  status deregister_memory(const local_region& region) override {
    return inner_->deregister_memory(region);
  }
  result<local_region> register_device_memory(void* ptr, size_t size, int device) override {
    return inner_->register_device_memory(ptr, size, device);
  }
  status write(int peer, const local_region& src_region, const void* src, size_t len,
               const remote_region& dst, uint64_t offset, uint32_t imm,
               int64_t deadline_ns) override;
  status progress(std::vector<uint32_t>& imms) override;
  size_t outstanding() const override { return pending_.size() + inner_->outstanding(); }
  const transport_description& describe() const override { return description_; }

 private:
  struct piece {
    uint64_t offset = 0;  // within the write
    uint64_t len = 0;
    bool posted = false;
    bool done = false;
    bool redeliver = false;  // post a second copy once the first completed
  };
  struct pending_write {
    int peer;
    local_region src_region;
    const char* src;
    remote_region dst;
    uint64_t dst_offset;
    uint32_t imm;
    int64_t deadline_ns;
    int delay;       // progress calls left before anything is posted
    size_t carrier;  // index of the piece that carries the immediate
    std::vector<piece> pieces;
    size_t inflight = 0;  // posted pieces (copies included) without a local completion
  };

  status step();
  status post_piece(uint64_t write_id, pending_write& w, size_t index, bool with_imm);

  std::unique_ptr<rdm_endpoint> inner_;
  std::mt19937_64 rng_;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, pending_write> pending_;  // by write id
  std::vector<uint32_t> held_imms_;                      // received, not yet handed out
  transport_description description_;
};

}  // namespace moerl::fabric
