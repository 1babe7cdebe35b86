// _moerl: the compiled half of the `moerl` Python package (python/moerl/). pybind11 rather
// than nanobind because Debian ships it (pybind11-dev): the package builds from the distro's
// packages like the rest of moerl. The binding takes tensors as data_ptr() integers, so it
// needs no torch headers; python/moerl/ep.py checks dtypes, shapes and devices first.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdlib>

#include "fabric/device_memory.h"
#include "fabric/transport.h"
#include "provenance/provenance.h"
#include "python/bindings/ep_core.h"

namespace py = pybind11;
using moerl::py::ep_core;

namespace {

// moerl's error codes become the Python exceptions a caller expects: bad arguments and a
// buffer too small for the tokens are ValueError, an incomplete step or a lost peer is
// TimeoutError, the rest RuntimeError. Messages keep moerl's wording.
[[noreturn]] void raise(const moerl::error& e) {
  const std::string what = e.message;
  switch (e.code) {
    case moerl::errc::invalid_argument:
    case moerl::errc::capacity_exceeded: throw py::value_error(what);
    case moerl::errc::timeout:
    case moerl::errc::peer_dead:
      PyErr_SetString(PyExc_TimeoutError,
                      (std::string(moerl::errc_name(e.code)) + ": " + what).c_str());
      throw py::error_already_set();
    default: throw std::runtime_error(std::string(moerl::errc_name(e.code)) + ": " + what);
  }
}

void check(const moerl::status& st) {
  if (!st) raise(st.err());
}

template <class T>
T* ptr(uintptr_t p) {
  return reinterpret_cast<T*>(p);
}

moerl::fabric::ep_dtype dtype_of(int code) {
  return code == 0 ? moerl::fabric::ep_dtype::bf16 : moerl::fabric::ep_dtype::fp32;
}

// moerl/_ep_device.py's memory codes: 0 host, 1 cuda, 2 host_split (fabric::ep_memory).
moerl::fabric::ep_memory memory_of(int code) {
  return code == 1   ? moerl::fabric::ep_memory::cuda
         : code == 2 ? moerl::fabric::ep_memory::host_split
                     : moerl::fabric::ep_memory::host;
}

}  // namespace

PYBIND11_MODULE(_moerl, m) {
  m.doc() = "moerl's compiled core; use the `moerl` and `moerl.ep` modules";
  m.attr("__version__") = MOERL_VERSION;
  // Whether this moerl has CUDA (moerl/_ep_device.py: CUDA tensors need it and a device).
  m.attr("cuda_build") = moerl::fabric::cuda_build();
  m.def(
      "provenance_json", [] { return moerl::collect_provenance().dump(2); },
      "The same JSON as `moerl version --json`.");

  // A block of host_block_pool memory as a writable byte buffer: torch.frombuffer views it
  // without a copy and keeps it alive until the last view dies, which returns the memory to
  // the pool (moerl/ep.py, _host_empty).
  py::class_<moerl::py::host_block>(m, "HostBlock", py::buffer_protocol())
      .def_property_readonly("size", &moerl::py::host_block::size)
      .def_buffer([](moerl::py::host_block& b) {
        return py::buffer_info(b.data(), 1, py::format_descriptor<uint8_t>::format(), 1, {b.size()},
                               {int64_t{1}}, /*readonly=*/false);
      });

  py::class_<ep_core>(m, "EpCore")
      .def(py::init([](int rank, int num_ranks, int64_t buffer_bytes, int64_t op_timeout_ms,
                       py::function allgather, const std::string& provider,
                       const std::string& paths, bool reorder_shim) {
             moerl::py::ep_core_options opt;
             opt.rank = rank;
             opt.num_ranks = num_ranks;
             opt.buffer_bytes = buffer_bytes;
             opt.op_timeout_ms = op_timeout_ms;
             // "" : MOERL_FABRIC_PROVIDER, else auto (as transport_options::from_config).
             opt.transport.provider = provider;
             if (const char* p = std::getenv("MOERL_FABRIC_PROVIDER"); provider.empty())
               opt.transport.provider = p ? p : "auto";
             opt.transport.paths = paths;
             opt.transport.reorder_shim = reorder_shim;
             // Called from inside dispatch/combine with the GIL released (group creation).
             auto fn =
                 [allgather](const std::string& mine) -> moerl::result<std::vector<std::string>> {
               py::gil_scoped_acquire gil;
               try {
                 std::vector<std::string> out;
                 for (py::handle h : allgather(py::bytes(mine)))
                   out.push_back(h.cast<std::string>());
                 return out;
               } catch (py::error_already_set& e) {
                 return moerl::error{
                     moerl::errc::peer_dead,
                     std::string("moerl.ep bootstrap all-gather failed: ") + e.what()};
               }
             };
             return std::make_unique<ep_core>(opt, fn);
           }),
           py::arg("rank"), py::arg("num_ranks"), py::arg("buffer_bytes"), py::arg("op_timeout_ms"),
           py::arg("allgather"), py::arg("provider") = "", py::arg("paths") = "auto",
           py::arg("reorder_shim") = false)
      .def("close", &ep_core::close,
           "Frees the fabric endpoints and regions now (the Buffer's finalizer calls it).")
      .def(
          "host_block",
          [](ep_core& c, int64_t size) {
            auto b = c.blocks().acquire(size);
            if (!b) raise(b.err());
            return std::move(*b);
          },
          "A block of at least `size` bytes of the Buffer's pooled host memory (HostBlock).")
      .def("recv_view", &ep_core::recv_view,
           "The last dispatch's rows in place (HostBlock), or None: copy them with "
           "read_dispatch instead.")
      .def("recv_views_held", &ep_core::recv_views_held)
      .def("cached_host_bytes", [](ep_core& c) { return c.blocks().cached_bytes(); })
      .def("capacity", &ep_core::capacity)
      .def("bytes_needed", &ep_core::bytes_needed)
      .def("layout",
           [](ep_core& c, uintptr_t topk_idx, int64_t num_tokens, int topk, int num_experts,
              uintptr_t per_rank, uintptr_t per_expert, uintptr_t in_rank) {
             moerl::status st;
             {
               py::gil_scoped_release nogil;
               st = c.layout(ptr<const int64_t>(topk_idx), num_tokens, topk, num_experts,
                             ptr<int32_t>(per_rank), ptr<int32_t>(per_expert),
                             ptr<uint8_t>(in_rank));
             }
             check(st);
           })
      .def(
          "dispatch",
          [](ep_core& c, uintptr_t x, int64_t num_tokens, int64_t hidden, int dtype,
             uintptr_t in_rank, uintptr_t topk_idx, uintptr_t topk_weights, int topk,
             int64_t routing_id, int memory) {
            moerl::result<int64_t> r = int64_t{0};
            {
              py::gil_scoped_release nogil;
              r = c.dispatch(ptr<const void>(x), num_tokens, hidden, dtype_of(dtype),
                             ptr<const uint8_t>(in_rank), ptr<const int64_t>(topk_idx),
                             ptr<const float>(topk_weights), topk, routing_id, memory_of(memory));
            }
            if (!r) raise(r.err());
            return *r;
          },
          py::arg("x"), py::arg("num_tokens"), py::arg("hidden"), py::arg("dtype"),
          py::arg("in_rank"), py::arg("topk_idx"), py::arg("topk_weights"), py::arg("topk"),
          py::arg("routing_id"), py::arg("memory") = 0)
      .def("prepare",
           [](ep_core& c, int dtype, int64_t hidden, int memory) {
             moerl::result<std::string> r = std::string();
             {
               py::gil_scoped_release nogil;
               r = c.prepare(dtype_of(dtype), hidden, memory_of(memory));
             }
             if (!r) raise(r.err());
             return *r;
           })
      .def("read_dispatch",
           [](ep_core& c, uintptr_t recv_x, uintptr_t src_rank, uintptr_t src_token,
              uintptr_t recv_idx, uintptr_t recv_w, int num_experts) {
             std::vector<int64_t> per_expert;
             moerl::status st;
             {
               py::gil_scoped_release nogil;
               st = c.read_dispatch(ptr<void>(recv_x), ptr<int32_t>(src_rank),
                                    ptr<int32_t>(src_token), ptr<int64_t>(recv_idx),
                                    ptr<float>(recv_w), num_experts, per_expert);
             }
             check(st);
             return per_expert;
           })
      .def(
          "combine",
          [](ep_core& c, uintptr_t x, int64_t num_rows, int64_t hidden, int dtype,
             uintptr_t in_rank, int64_t num_tokens, int64_t routing_id, uintptr_t y,
             uintptr_t topk_weights, int topk, uintptr_t combined_weights, int memory) {
            moerl::status st;
            {
              py::gil_scoped_release nogil;
              st = c.combine(ptr<const void>(x), num_rows, hidden, dtype_of(dtype),
                             ptr<const uint8_t>(in_rank), num_tokens, routing_id, ptr<void>(y),
                             ptr<const float>(topk_weights), topk, ptr<float>(combined_weights),
                             memory_of(memory));
            }
            check(st);
          },
          py::arg("x"), py::arg("num_rows"), py::arg("hidden"), py::arg("dtype"),
          py::arg("in_rank"), py::arg("num_tokens"), py::arg("routing_id"), py::arg("y"),
          py::arg("topk_weights"), py::arg("topk"), py::arg("combined_weights"),
          py::arg("memory") = 0)
      .def("ll_dispatch",
           [](ep_core& c, int64_t hidden, int dtype, int64_t max_tokens, int num_experts, int topk,
              uintptr_t x, uintptr_t topk_idx, int64_t num_tokens, int64_t routing_id,
              uintptr_t recv_x, uintptr_t recv_count, uintptr_t src_info, uintptr_t layout_range,
              uintptr_t fp8_q, uintptr_t fp8_scales, int memory) {
             moerl::status st;
             {
               py::gil_scoped_release nogil;
               st = c.ll_dispatch(
                   {hidden, dtype_of(dtype), max_tokens, num_experts, topk, memory_of(memory)},
                   ptr<const void>(x), ptr<const int64_t>(topk_idx), num_tokens, routing_id,
                   ptr<void>(recv_x), ptr<int32_t>(recv_count), ptr<int32_t>(src_info),
                   ptr<int64_t>(layout_range), {ptr<uint8_t>(fp8_q), ptr<float>(fp8_scales)});
             }
             check(st);
           })
      .def("ll_combine",
           [](ep_core& c, int64_t hidden, int dtype, int64_t max_tokens, int num_experts, int topk,
              uintptr_t x, uintptr_t topk_idx, uintptr_t topk_weights, int64_t num_tokens,
              int64_t routing_id, uintptr_t y, int memory) {
             moerl::status st;
             {
               py::gil_scoped_release nogil;
               st = c.ll_combine(
                   {hidden, dtype_of(dtype), max_tokens, num_experts, topk, memory_of(memory)},
                   ptr<const void>(x), ptr<const int64_t>(topk_idx), ptr<const float>(topk_weights),
                   num_tokens, routing_id, ptr<void>(y));
             }
             check(st);
           })
      .def("ll_combine_buffer",
           [](ep_core& c, int64_t hidden, int dtype, int64_t max_tokens, int num_experts, int topk,
              int memory, int64_t routing_id) -> uintptr_t {
             // An address (0: none); view_of makes the tensor's memory once per address.
             return reinterpret_cast<uintptr_t>(c.ll_combine_buffer(
                 {hidden, dtype_of(dtype), max_tokens, num_experts, topk, memory_of(memory)},
                 routing_id));
           })
      .def("ll_dispatch_buffer",
           [](ep_core& c, int64_t hidden, int dtype, int64_t max_tokens, int num_experts, int topk,
              int memory) -> uintptr_t {
             return reinterpret_cast<uintptr_t>(c.ll_dispatch_buffer(
                 {hidden, dtype_of(dtype), max_tokens, num_experts, topk, memory_of(memory)}));
           })
      .def("view_of",
           [](ep_core&, uintptr_t address, int64_t num_bytes) -> py::memoryview {
             // A writable view that owns nothing, of ll_combine_buffer's or
             // ll_dispatch_buffer's memory: valid while the channel lives (until the core is
             // closed), as moerl/ep_low_latency.py says of the tensors made of it. Addresses
             // rather than views come back from those calls, so that Python builds the tensor
             // once per address, not once per decode step (torch.frombuffer and a view cost
             // tens of microseconds there).
             return py::memoryview::from_memory(ptr<void>(address),
                                                static_cast<py::ssize_t>(num_bytes));
           })
      .def("ll_prepare",
           [](ep_core& c, int64_t hidden, int dtype, int64_t max_tokens, int num_experts, int topk,
              int memory) {
             moerl::result<std::string> r = std::string();
             {
               py::gil_scoped_release nogil;
               r = c.ll_prepare(
                   {hidden, dtype_of(dtype), max_tokens, num_experts, topk, memory_of(memory)});
             }
             if (!r) raise(r.err());
             return *r;
           })
      .def("ll_clean",
           [](ep_core& c) {
             moerl::status st;
             {
               py::gil_scoped_release nogil;
               st = c.ll_clean();
             }
             check(st);
           })
      .def("describe", [](const ep_core& c) {
        py::list out;
        for (const auto& ch : c.describe()) {
          py::dict d;
          d["channel"] = ch.name;
          d["provider"] = ch.provider;
          d["peer_paths"] = ch.peer_paths;
          d["peer_device_paths"] = ch.peer_device_paths;
          d["reorder_shim"] = ch.reorder_shim;
          d["memory"] = ch.memory;
          out.append(d);
        }
        return out;
      });
}
