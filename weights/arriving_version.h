// A version still arriving at a reader, served to other readers chunk by chunk as it arrives
// (peer serving, weights/FANOUT.md). Without this a reader could pass a version on only once
// it held all of it, so a tree of depth d would take d whole transfers; with it, a child
// reads chunk k from its parent as soon as the parent verified chunk k, and delivery to the
// whole tree takes one transfer plus a pipeline depth.
// The buffer is allocated once at its final size and never moves: the writer fills chunk k,
// then marks it held; a server thread sends only chunks marked held, so the two never touch
// the same bytes. Thread-safe: one writer (the fanout_reader) and any number of servers.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "weights/version_cache.h"

namespace moerl::weights {

class arriving_version {
 public:
  // The version's size, content hash and chunking as its source's meta named them.
  arriving_version(uint64_t version, uint64_t num_bytes, std::string content_hash,
                   uint64_t chunk_bytes);

  uint64_t version() const { return version_; }
  uint64_t num_bytes() const { return buffer_->size(); }
  const std::string& content_hash() const { return content_hash_; }
  uint64_t chunk_bytes() const { return chunk_bytes_; }
  uint64_t num_chunks() const { return hashes_.size(); }
  uint64_t chunk_offset(uint64_t k) const { return k * chunk_bytes_; }
  uint64_t chunk_size(uint64_t k) const;

  // Writer side: copies chunk k (already checked against `chunk_hash`) in, then marks it
  // held so servers may send it. errc::invalid_argument for a chunk outside the version or
  // of the wrong size.
  status put_chunk(uint64_t k, std::string_view bytes, std::string chunk_hash);
  // The hash of chunk k once held; nullopt before.
  std::optional<std::string> chunk_hash(uint64_t k) const;
  uint64_t num_held() const;
  bool complete() const { return num_held() == num_chunks(); }
  // The bytes so far (held chunks only are meaningful); the whole version once complete().
  std::shared_ptr<const std::string> bytes() const { return buffer_; }
  // The complete version as a cache entry, its chunk hashes those already checked (no second
  // hashing pass). Call only once complete().
  cached_version to_cached() const;
  // What serve_one needs to send chunk k without a copy (bytes and chunking only).
  std::shared_ptr<const cached_version> send_view() const { return view_; }

 private:
  uint64_t version_, chunk_bytes_;
  std::string content_hash_;
  std::shared_ptr<std::string> buffer_;
  std::shared_ptr<const cached_version> view_;
  mutable std::mutex mu_;
  std::vector<std::string> hashes_;  // "" until the chunk is held
  uint64_t num_held_ = 0;
};

// The versions arriving at one reader, looked up by its server (cache_server's
// serve_arriving). Thread-safe.
class arriving_versions {
 public:
  void add(std::shared_ptr<arriving_version> v);
  void remove(uint64_t version);
  std::shared_ptr<arriving_version> find(uint64_t version) const;

  // The answer to a meta or get request for an arriving version: meta as a cache's (plus
  // `arriving`: true and `chunks_held`), a get of a held chunk with the chunk to send in
  // *send. A chunk not held yet is errc::not_found (the asker waits and asks again, or
  // moves on); a chunk outside the version errc::invalid_argument. nullopt when `version` is
  // not arriving here.
  std::optional<result<nlohmann::json>> answer(const std::string& verb, uint64_t version,
                                               const nlohmann::json& request, uint64_t load,
                                               std::shared_ptr<const cached_version>* send) const;

 private:
  mutable std::mutex mu_;
  std::map<uint64_t, std::shared_ptr<arriving_version>> arriving_;
};

}  // namespace moerl::weights
