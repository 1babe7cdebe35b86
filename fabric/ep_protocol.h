// Wire constants of the EP protocol (fabric/PROTOCOL.md explains them). Private to fabric/.
#pragma once

#include <cstdint>

namespace moerl::fabric::proto {

// 32-bit immediate data, EFA's limit:
//   bits 31..30  kind   (imm_kind)
//   bits 29..26  step   (step number mod 16)
//   bits 25..14  source rank in the group (< 4096)
//   bit  13      forwarded: a count or write of the intra-node forwarding phase (normal
//                mode across nodes), counted apart from the direct phase
//   bits 12..0   zero (reserved)
enum imm_kind : uint32_t {
  imm_count = 0,     // a count record landed in the ctrl region
  imm_dispatch = 1,  // a dispatch data write landed
  imm_combine = 2,   // a combine data write landed
  imm_reserved = 3,  // never sent by the EP layer; receiving it is a protocol error
};
constexpr uint32_t step_slots = 16;
constexpr int max_ranks = 4096;

constexpr uint32_t make_imm(imm_kind kind, uint32_t step, uint32_t src, uint32_t forwarded = 0) {
  return (static_cast<uint32_t>(kind) << 30) | ((step % step_slots) << 26) | (src << 14) |
         (forwarded << 13);
}
constexpr uint32_t imm_kind_of(uint32_t imm) { return imm >> 30; }
constexpr uint32_t imm_step_of(uint32_t imm) { return (imm >> 26) & 0xf; }
constexpr uint32_t imm_src_of(uint32_t imm) { return (imm >> 14) & 0xfff; }
constexpr uint32_t imm_forwarded_of(uint32_t imm) { return (imm >> 13) & 1; }
constexpr uint32_t imm_reserved_bits(uint32_t imm) { return imm & 0x1fff; }

// What each rank writes into every peer's ctrl region at the start of a dispatch. Normal
// mode appends uint32 entries[num_experts]: this sender's (token, expert) entries per global
// expert, from which every rank computes where each source's rows go in every destination's
// expert-major output (PROTOCOL.md, "Rows in place").
struct count_record {
  uint64_t rows;      // rows (normal: tokens; ll/baseline: (token, expert) entries) for you
  uint64_t max_rows;  // the largest `rows` this sender has for any rank (baseline padding)
  uint64_t flags;     // count_flag_* bits; others zero
  // normal mode: the slot of my dispatch output that your in-place rows go to
  // (ep_config::output_slots; 0 without); zero in the other modes.
  uint64_t output_slot;
};
// Normal mode: the payload of my rows for you is already stored in your dispatch output, in
// expert-major order (same host); my rows in your dispatch region carry metadata only.
constexpr uint64_t count_flag_in_place = 1;

// Metadata after the hidden payload of a normal-mode dispatch row.
//   int32 token; int32 source rank; int32 topk_idx[topk]; float topk_weight[topk]
// (the source rank survives forwarding through a gateway rank).
constexpr int64_t normal_meta_bytes(int topk) { return 8 + 8 * static_cast<int64_t>(topk); }

// Metadata after the hidden payload of a low-latency or baseline row.
struct entry_meta {
  int32_t token;   // token index on the source rank
  int32_t k;       // which of the token's top-k entries
  int32_t expert;  // global expert id
  int32_t reserved;
};

constexpr int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

}  // namespace moerl::fabric::proto
