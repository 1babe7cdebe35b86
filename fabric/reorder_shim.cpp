#include "fabric/internal/reorder_shim.h"

#include <algorithm>

namespace moerl::fabric {

reorder_shim::reorder_shim(std::unique_ptr<rdm_endpoint> inner, uint64_t seed)
    : inner_(std::move(inner)), rng_(seed) {
  description_ = inner_->describe();
  description_.reorder_shim = true;
}

status reorder_shim::write(int peer, const local_region& src_region, const void* src, size_t len,
                           const remote_region& dst, uint64_t offset, uint32_t imm,
                           int64_t deadline_ns) {
  if (len == 0) return error{errc::invalid_argument, "zero-length write"};
  if (offset + len > dst.size)
    return error{errc::invalid_argument,
                 "write overruns peer " + std::to_string(peer) + "'s region"};
  pending_write w{peer, src_region,  static_cast<const char*>(src), dst, offset,
                  imm,  deadline_ns, static_cast<int>(rng_() % 6),  0,   {},
                  0};
  // Random cut points; a piece is at least one byte.
  const size_t max_pieces = std::min<size_t>(4, len);
  const size_t num_pieces = 1 + rng_() % max_pieces;
  std::vector<uint64_t> cuts;
  while (cuts.size() + 1 < num_pieces) {
    const uint64_t c = 1 + rng_() % (len - 1);
    if (std::find(cuts.begin(), cuts.end(), c) == cuts.end()) cuts.push_back(c);
  }
  std::sort(cuts.begin(), cuts.end());
  uint64_t start = 0;
  for (size_t i = 0; i <= cuts.size(); ++i) {
    const uint64_t end = i < cuts.size() ? cuts[i] : len;
    piece p;
    p.offset = start;
    p.len = end - start;
    p.redeliver = rng_() % 4 == 0;
    w.pieces.push_back(p);
    start = end;
  }
  w.carrier = rng_() % w.pieces.size();
  pending_.emplace(next_id_++, std::move(w));
  return {};
}

status reorder_shim::post_piece(uint64_t write_id, pending_write& w, size_t index, bool with_imm) {
  piece& p = w.pieces[index];
  const uint64_t id = (write_id << 8) | index;
  auto st = inner_->post_write(w.peer, w.src_region, w.src + p.offset, p.len, w.dst,
                               w.dst_offset + p.offset, with_imm, w.imm, id, w.deadline_ns);
  if (!st) return st;
  p.posted = true;
  ++w.inflight;
  return {};
}

// One round: every pending write either waits out its delay or gets one random action.
status reorder_shim::step() {
  std::vector<uint64_t> ids;
  ids.reserve(pending_.size());
  for (const auto& [id, w] : pending_) ids.push_back(id);
  std::shuffle(ids.begin(), ids.end(), rng_);
  for (uint64_t id : ids) {
    pending_write& w = pending_.at(id);
    if (w.delay > 0) {
      --w.delay;
      continue;
    }
    std::vector<size_t> unposted;
    bool others_done = true;
    for (size_t i = 0; i < w.pieces.size(); ++i) {
      if (i == w.carrier) continue;
      if (!w.pieces[i].posted) unposted.push_back(i);
      if (!w.pieces[i].done) others_done = false;
    }
    if (!unposted.empty()) {
      if (auto st = post_piece(id, w, unposted[rng_() % unposted.size()], false); !st) return st;
      continue;
    }
    // Re-deliver: the same bytes again, after the first copy landed and before the completion.
    bool redelivered = false;
    for (size_t i = 0; i < w.pieces.size(); ++i) {
      piece& p = w.pieces[i];
      if (i != w.carrier && p.done && p.redeliver) {
        p.redeliver = false;
        p.done = false;
        others_done = false;
        if (auto st = post_piece(id, w, i, false); !st) return st;
        redelivered = true;
        break;
      }
    }
    if (redelivered) continue;
    if (others_done && w.inflight == 0 && !w.pieces[w.carrier].posted) {
      if (rng_() % 2 == 0) continue;  // a little extra delay before the completion
      if (auto st = post_piece(id, w, w.carrier, true); !st) return st;
    }
  }
  return {};
}

status reorder_shim::progress(std::vector<uint32_t>& imms) {
  if (auto st = step(); !st) return st;
  std::vector<uint32_t> received;
  std::vector<uint64_t> done;
  if (auto st = inner_->poll(received, &done); !st) return st;
  for (uint64_t raw : done) {
    const uint64_t write_id = raw >> 8;
    const size_t index = raw & 0xff;
    auto it = pending_.find(write_id);
    if (it == pending_.end()) continue;
    pending_write& w = it->second;
    --w.inflight;
    w.pieces[index].done = true;
    if (index == w.carrier) pending_.erase(it);
  }
  // Completions reach the caller shuffled, and about a third of them one call late.
  held_imms_.insert(held_imms_.end(), received.begin(), received.end());
  std::shuffle(held_imms_.begin(), held_imms_.end(), rng_);
  std::vector<uint32_t> keep;
  for (uint32_t imm : held_imms_) {
    if (rng_() % 3 == 0)
      keep.push_back(imm);
    else
      imms.push_back(imm);
  }
  held_imms_.swap(keep);
  return {};
}

}  // namespace moerl::fabric
