// A libfabric RDM endpoint (fabric, domain, CQ, AV, EP) implementing `transport`.
// Private to fabric/. Besides the transport operations it offers the raw write/poll the
// reorder shim builds on: writes with or without immediate data, and the ids of writes
// that completed locally.
#pragma once

#include <deque>
#include <memory>
#include <vector>

#include <rdma/fabric.h>

#include "fabric/transport.h"

namespace moerl::fabric {

class rdm_endpoint final : public transport {
 public:
  static result<std::unique_ptr<rdm_endpoint>> open(const transport_options& options);
  ~rdm_endpoint() override;

  std::string address() const override { return address_; }
  status set_peers(const std::vector<std::string>& addresses) override;
  result<local_region> register_memory(void* ptr, size_t size) override;
  status deregister_memory(const local_region& region) override;
  result<local_region> register_device_memory(void* ptr, size_t size, int device) override;
  status write(int peer, const local_region& src_region, const void* src, size_t len,
               const remote_region& dst, uint64_t offset, uint32_t imm,
               int64_t deadline_ns) override;
  status progress(std::vector<uint32_t>& imms) override;
  size_t outstanding() const override { return outstanding_; }
  const transport_description& describe() const override { return description_; }

  // The raw operations. `id` comes back in `done` of poll() when the write completes
  // locally; `with_imm` false posts a write the peer does not see a completion for.
  status post_write(int peer, const local_region& src_region, const void* src, size_t len,
                    const remote_region& dst, uint64_t offset, bool with_imm, uint32_t imm,
                    uint64_t id, int64_t deadline_ns);
  status poll(std::vector<uint32_t>& imms, std::vector<uint64_t>* done);

 private:
  rdm_endpoint() = default;
  status open_on(fi_info* info);
  // fi_mr_reg of host memory (cuda_device -1), or fi_mr_regattr of device memory.
  result<local_region> register_region(void* ptr, size_t size, int cuda_device);

  // Per-write libfabric context (FI_CONTEXT2 mode), recycled through a free list.
  struct op_context {
    fi_context2 ctx;
    uint64_t id = 0;
    int peer = -1;
  };
  op_context* acquire_context();

  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_av* av_ = nullptr;
  fid_ep* ep_ = nullptr;
  std::vector<fid_mr*> mrs_;
  std::vector<fi_addr_t> peers_;
  std::string address_;
  uint64_t next_key_ = 1;
  size_t outstanding_ = 0;
  std::deque<op_context> contexts_;
  std::vector<op_context*> free_contexts_;
  // Immediates and completion ids seen while retrying a refused post (FI_EAGAIN),
  // handed out by the next poll().
  std::vector<uint32_t> stashed_imms_;
  std::vector<uint64_t> stashed_done_;
  transport_description description_;
  // transport_options::abort: ends a post refused until the deadline (a peer that stopped
  // progressing) as soon as it is raised.
  std::shared_ptr<const std::atomic<bool>> abort_;
};

}  // namespace moerl::fabric
