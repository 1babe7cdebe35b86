// pybind11 bindings of the kernels/ CPU primitives, for the PyTorch-oracle test only: numpy
// arrays in, freshly allocated numpy arrays out; a failed status raises ValueError carrying
// the kernel's message. bf16 tensors cross as uint16 arrays (torch: .view(torch.int16)).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "kernels/combine.h"
#include "kernels/dispatch_layout.h"
#include "kernels/dtypes.h"
#include "kernels/expert_ffn.h"
#include "kernels/load_stats.h"
#include "kernels/permute.h"
#include "kernels/routing.h"

namespace py = pybind11;
using namespace moerl::kernels;

namespace {

template <class T>
using arr = py::array_t<T, py::array::c_style | py::array::forcecast>;

thread_pool& pool() {
  static thread_pool p(0);
  return p;
}

void check(const moerl::status& st) {
  if (!st.ok()) throw py::value_error(st.err().to_string());
}

template <class T>
arr<T> empty(std::vector<py::ssize_t> shape) {
  return arr<T>(shape);
}

routing_params make_params(int num_experts, int topk, const std::string& scoring, int num_groups,
                           int topk_groups, bool renormalize, float route_scale) {
  routing_params p;
  p.num_experts = num_experts;
  p.topk = topk;
  if (scoring == "softmax")
    p.scoring = score_function::softmax;
  else if (scoring == "sigmoid")
    p.scoring = score_function::sigmoid;
  else
    throw py::value_error("scoring must be softmax or sigmoid, not " + scoring);
  p.num_groups = num_groups;
  p.topk_groups = topk_groups;
  p.renormalize = renormalize;
  p.route_scale = route_scale;
  return p;
}

const bf16* as_bf16(const arr<uint16_t>& a) { return reinterpret_cast<const bf16*>(a.data()); }
bf16* as_bf16(arr<uint16_t>& a) { return reinterpret_cast<bf16*>(a.mutable_data()); }

}  // namespace

PYBIND11_MODULE(moerl_kernels_py, m) {
  m.doc() = "moerl kernels/ CPU primitives, for testing against PyTorch";

  m.def("route_forward", [](arr<float> logits, std::optional<arr<float>> bias,
                            std::optional<arr<uint8_t>> mask, int topk, const std::string& scoring,
                            int num_groups, int topk_groups, bool renormalize, float route_scale) {
    const int64_t T = logits.shape(0);
    const int E = static_cast<int>(logits.shape(1));
    auto p = make_params(E, topk, scoring, num_groups, topk_groups, renormalize, route_scale);
    auto scores = empty<float>({T, E});
    auto idx = empty<int64_t>({T, topk});
    auto w = empty<float>({T, topk});
    check(route_forward(pool(), p, logits.data(), bias ? bias->data() : nullptr,
                        mask ? mask->data() : nullptr, T, scores.mutable_data(), idx.mutable_data(),
                        w.mutable_data()));
    return py::make_tuple(scores, idx, w);
  });

  m.def("route_backward", [](arr<float> scores, arr<int64_t> idx, arr<float> grad_w,
                             std::optional<arr<float>> extra, const std::string& scoring,
                             int num_groups, int topk_groups, bool renormalize, float route_scale) {
    const int64_t T = scores.shape(0);
    const int E = static_cast<int>(scores.shape(1));
    auto p = make_params(E, static_cast<int>(idx.shape(1)), scoring, num_groups, topk_groups,
                         renormalize, route_scale);
    auto gl = empty<float>({T, E});
    check(route_backward(pool(), p, scores.data(), idx.data(), grad_w.data(),
                         extra ? extra->data() : nullptr, T, gl.mutable_data()));
    return gl;
  });

  m.def("load_balance_loss", [](arr<float> scores, arr<int64_t> idx, float coeff) {
    const int64_t T = scores.shape(0);
    const int E = static_cast<int>(scores.shape(1));
    float loss = 0;
    auto g = empty<float>({T, E});
    check(load_balance_loss(pool(), scores.data(), idx.data(), T, E, static_cast<int>(idx.shape(1)),
                            coeff, &loss, g.mutable_data()));
    std::vector<int64_t> counts(E);
    check(count_tokens_per_expert(pool(), idx.data(), T, static_cast<int>(idx.shape(1)), E,
                                  counts.data()));
    return py::make_tuple(loss, g, counts, load_imbalance(counts.data(), E));
  });

  m.def("dispatch_layout", [](arr<int64_t> idx, int num_experts, int num_ranks, int alignment) {
    const int64_t T = idx.shape(0);
    const int K = static_cast<int>(idx.shape(1));
    auto pe = empty<int64_t>({num_experts});
    auto pr = empty<int64_t>({num_ranks});
    auto in_rank = empty<uint8_t>({T, num_ranks});
    auto rank_slot = empty<int64_t>({T, num_ranks});
    auto offset = empty<int64_t>({num_experts + 1});
    auto slot = empty<int64_t>({T, K});
    dispatch_layout_out out{pe.mutable_data(),        pr.mutable_data(),     in_rank.mutable_data(),
                            rank_slot.mutable_data(), offset.mutable_data(), slot.mutable_data()};
    check(get_dispatch_layout(pool(), idx.data(), {T, K, num_experts, num_ranks, alignment}, out));
    py::dict d;
    d["num_tokens_per_expert"] = pe;
    d["num_tokens_per_rank"] = pr;
    d["is_token_in_rank"] = in_rank;
    d["token_rank_slot"] = rank_slot;
    d["expert_offset"] = offset;
    d["token_expert_slot"] = slot;
    return d;
  });

  // Row-layout primitives, fp32 ("f32") and bf16 ("bf16") storage.
  m.def("permute_forward", [](arr<float> x, arr<int64_t> slot, int64_t num_rows) {
    auto out = empty<float>({num_rows, x.shape(1)});
    check(permute_forward(pool(), x.data(), slot.data(), x.shape(0),
                          static_cast<int>(slot.shape(1)), x.shape(1), num_rows,
                          out.mutable_data()));
    return out;
  });
  m.def("permute_forward_bf16", [](arr<uint16_t> x, arr<int64_t> slot, int64_t num_rows) {
    auto out = empty<uint16_t>({num_rows, x.shape(1)});
    check(permute_forward(pool(), as_bf16(x), slot.data(), x.shape(0),
                          static_cast<int>(slot.shape(1)), x.shape(1), num_rows, as_bf16(out)));
    return out;
  });
  m.def("permute_backward", [](arr<float> g, arr<int64_t> slot) {
    const int64_t T = slot.shape(0);
    auto gx = empty<float>({T, g.shape(1)});
    check(permute_backward(pool(), g.data(), slot.data(), T, static_cast<int>(slot.shape(1)),
                           g.shape(1), g.shape(0), gx.mutable_data()));
    return gx;
  });
  m.def("unpermute_forward", [](arr<float> p, arr<int64_t> slot) {
    const int64_t T = slot.shape(0), K = slot.shape(1);
    auto u = empty<float>({T, K, p.shape(1)});
    check(unpermute_forward(pool(), p.data(), slot.data(), T, static_cast<int>(K), p.shape(1),
                            p.shape(0), u.mutable_data()));
    return u;
  });
  m.def("unpermute_backward", [](arr<float> gu, arr<int64_t> slot, int64_t num_rows) {
    const int64_t T = slot.shape(0), K = slot.shape(1), H = gu.shape(2);
    auto gp = empty<float>({num_rows, H});
    check(unpermute_backward(pool(), gu.data(), slot.data(), T, static_cast<int>(K), H, num_rows,
                             gp.mutable_data()));
    return gp;
  });
  m.def("combine_forward", [](arr<float> y, arr<int64_t> slot, arr<float> w) {
    const int64_t T = slot.shape(0);
    auto out = empty<float>({T, y.shape(1)});
    check(combine_forward(pool(), y.data(), slot.data(), w.data(), T,
                          static_cast<int>(slot.shape(1)), y.shape(1), y.shape(0),
                          out.mutable_data()));
    return out;
  });
  m.def("combine_forward_bf16", [](arr<uint16_t> y, arr<int64_t> slot, arr<float> w) {
    const int64_t T = slot.shape(0);
    auto out = empty<uint16_t>({T, y.shape(1)});
    check(combine_forward(pool(), as_bf16(y), slot.data(), w.data(), T,
                          static_cast<int>(slot.shape(1)), y.shape(1), y.shape(0), as_bf16(out)));
    return out;
  });
  m.def("combine_backward", [](arr<float> gout, arr<float> y, arr<int64_t> slot, arr<float> w) {
    const int64_t T = slot.shape(0), K = slot.shape(1);
    auto gy = empty<float>({y.shape(0), y.shape(1)});
    auto gw = empty<float>({T, K});
    check(combine_backward(pool(), gout.data(), y.data(), slot.data(), w.data(), T,
                           static_cast<int>(K), y.shape(1), y.shape(0), gy.mutable_data(),
                           gw.mutable_data()));
    return py::make_tuple(gy, gw);
  });
  m.def("combine_backward_bf16",
        [](arr<uint16_t> gout, arr<uint16_t> y, arr<int64_t> slot, arr<float> w) {
          const int64_t T = slot.shape(0), K = slot.shape(1);
          auto gy = empty<uint16_t>({y.shape(0), y.shape(1)});
          auto gw = empty<float>({T, K});
          check(combine_backward(pool(), as_bf16(gout), as_bf16(y), slot.data(), w.data(), T,
                                 static_cast<int>(K), y.shape(1), y.shape(0), as_bf16(gy),
                                 gw.mutable_data()));
          return py::make_tuple(gy, gw);
        });

  m.def("expert_ffn_forward", [](arr<float> x, arr<int64_t> offset, arr<float> wgu, arr<float> wd) {
    const int E = static_cast<int>(wgu.shape(0));
    const int64_t F = wgu.shape(1) / 2, H = wgu.shape(2), R = x.shape(0);
    auto h = empty<float>({R, 2 * F});
    auto a = empty<float>({R, F});
    auto y = empty<float>({R, H});
    check(expert_ffn_forward(pool(), {E, H, F}, offset.data(), x.data(), wgu.data(), wd.data(),
                             h.mutable_data(), a.mutable_data(), y.mutable_data()));
    return py::make_tuple(y, h, a);
  });
  m.def("expert_ffn_forward_bf16",
        [](arr<uint16_t> x, arr<int64_t> offset, arr<uint16_t> wgu, arr<uint16_t> wd) {
          const int E = static_cast<int>(wgu.shape(0));
          const int64_t F = wgu.shape(1) / 2, H = wgu.shape(2), R = x.shape(0);
          auto y = empty<uint16_t>({R, H});
          check(expert_ffn_forward(pool(), {E, H, F}, offset.data(), as_bf16(x), as_bf16(wgu),
                                   as_bf16(wd), as_bf16(y)));
          return y;
        });
  m.def("expert_ffn_backward", [](arr<float> x, arr<int64_t> offset, arr<float> wgu, arr<float> wd,
                                  arr<float> h, arr<float> a, arr<float> gy) {
    const int E = static_cast<int>(wgu.shape(0));
    const int64_t F = wgu.shape(1) / 2, H = wgu.shape(2), R = x.shape(0);
    auto gx = empty<float>({R, H});
    auto gwgu = empty<float>({E, 2 * F, H});
    auto gwd = empty<float>({E, H, F});
    check(expert_ffn_backward(pool(), {E, H, F}, offset.data(), x.data(), wgu.data(), wd.data(),
                              h.data(), a.data(), gy.data(), gx.mutable_data(), gwgu.mutable_data(),
                              gwd.mutable_data()));
    return py::make_tuple(gx, gwgu, gwd);
  });

  m.def("fp8_quantize", [](arr<float> x) {
    const int64_t R = x.shape(0), H = x.shape(1);
    auto q = empty<uint8_t>({R, H});
    auto s = empty<float>({R, fp8_num_blocks(H)});
    check(fp8_quantize(pool(), x.data(), R, H, q.mutable_data(), s.mutable_data()));
    return py::make_tuple(q, s);
  });
  m.def("fp8_dequantize", [](arr<uint8_t> q, arr<float> s) {
    const int64_t R = q.shape(0), H = q.shape(1);
    auto x = empty<float>({R, H});
    check(fp8_dequantize(pool(), q.data(), s.data(), R, H, x.mutable_data()));
    return x;
  });
}
