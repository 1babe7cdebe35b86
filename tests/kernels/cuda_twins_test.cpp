// The CUDA twins against the CPU implementations on the same inputs. Runs where a GPU is
// visible; elsewhere every test is skipped with a message saying so.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/combine.h"
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/dispatch_layout.h"
#include "kernels/expert_ffn.h"
#include "kernels/load_stats.h"
#include "kernels/permute.h"
#include "kernels/routing.h"
#include "test_util.h"
#include "tests/support/cuda_test_util.h"

using namespace moerl::kernels;
using namespace moerl::kernels::testing;

namespace {
#define REQUIRE_GPU() MOERL_REQUIRE_GPU("CUDA twins")
using moerl::testing::dev;
using moerl::testing::expect_close;
}  // namespace

TEST(cuda_twins, routing_forward_and_backward_match_the_cpu) {
  REQUIRE_GPU();
  thread_pool pool(2);
  for (bool grouped : {false, true}) {
    routing_params p;
    p.num_experts = 64;
    p.topk = 6;
    p.scoring = grouped ? score_function::sigmoid : score_function::softmax;
    p.num_groups = grouped ? 8 : 1;
    p.topk_groups = grouped ? 3 : 1;
    p.route_scale = 2.0f;
    const int64_t T = 300;
    auto logits = random_floats(T * 64, 1, -3, 3);
    auto bias = random_floats(64, 2, -0.05f, 0.05f);
    auto gw = random_floats(T * 6, 3);
    std::vector<uint8_t> mask(T, 1);
    mask[7] = 0;
    std::vector<float> s(T * 64), w(T * 6), gl(T * 64);
    std::vector<int64_t> idx(T * 6);
    ASSERT_TRUE(route_forward(pool, p, logits.data(), bias.data(), mask.data(), T, s.data(),
                              idx.data(), w.data())
                    .ok());
    ASSERT_TRUE(
        route_backward(pool, p, s.data(), idx.data(), gw.data(), nullptr, T, gl.data()).ok());
    dev<float> dl(logits), db(bias), ds(T * 64), dw(T * 6), dgw(gw), dgl(T * 64);
    dev<uint8_t> dm(mask);
    dev<int64_t> di(T * 6);
    ASSERT_TRUE(cuda::route_forward(nullptr, p, dl.get(), db.get(), dm.get(), T, ds.get(), di.get(),
                                    dw.get())
                    .ok());
    ASSERT_TRUE(
        cuda::route_backward(nullptr, p, ds.get(), di.get(), dgw.get(), nullptr, T, dgl.get())
            .ok());
    EXPECT_EQ(di.host(), idx);
    expect_close(ds.host(), s, 1e-5, "scores");
    expect_close(dw.host(), w, 1e-5, "weights");
    expect_close(dgl.host(), gl, 1e-5, "grad_logits");
  }
}

TEST(cuda_twins, load_statistics_match_the_cpu) {
  REQUIRE_GPU();
  thread_pool pool(2);
  const int64_t T = 500;
  const int E = 32, K = 4;
  auto idx = random_topk_idx(T, K, E, 5, 0.1);
  auto scores = random_floats(T * E, 6, 0, 1);
  std::vector<int64_t> counts(E);
  std::vector<float> grad(T * E);
  float loss = 0;
  ASSERT_TRUE(count_tokens_per_expert(pool, idx.data(), T, K, E, counts.data()).ok());
  ASSERT_TRUE(
      load_balance_loss(pool, scores.data(), idx.data(), T, E, K, 0.01f, &loss, grad.data()).ok());
  dev<int64_t> di(idx), dc(E);
  dev<float> dsc(scores), dg(T * E), dloss(1);
  ASSERT_TRUE(cuda::count_tokens_per_expert(nullptr, di.get(), T, K, E, dc.get()).ok());
  ASSERT_TRUE(
      cuda::load_balance_loss(nullptr, dsc.get(), di.get(), T, E, K, 0.01f, dloss.get(), dg.get())
          .ok());
  EXPECT_EQ(dc.host(), counts);
  EXPECT_EQ(dloss.host()[0], loss);
  EXPECT_EQ(dg.host(), grad);
}

TEST(cuda_twins, dispatch_layout_is_identical_to_the_cpu_including_edge_cases) {
  REQUIRE_GPU();
  thread_pool pool(2);
  struct c {
    int64_t T;
    int K, E, R, align;
    double masked;
  };
  for (auto cs : {c{3000, 8, 256, 32, 1, 0.0}, c{77, 4, 16, 4, 8, 0.3}, c{0, 8, 16, 4, 1, 0.0},
                  c{64, 8, 8, 2, 1, 0.0}}) {
    auto idx = random_topk_idx(cs.T, cs.K, cs.E, 9, cs.masked);
    std::vector<int64_t> pe(cs.E), pr(cs.R), rs(cs.T * cs.R), off(cs.E + 1), slot(cs.T * cs.K);
    std::vector<uint8_t> ir(cs.T * cs.R);
    dispatch_layout_params p{cs.T, cs.K, cs.E, cs.R, cs.align};
    ASSERT_TRUE(
        get_dispatch_layout(pool, idx.data(), p,
                            {pe.data(), pr.data(), ir.data(), rs.data(), off.data(), slot.data()})
            .ok());
    dev<int64_t> di(idx), dpe(cs.E), dpr(cs.R), drs(cs.T * cs.R), doff(cs.E + 1),
        dslot(cs.T * cs.K);
    dev<uint8_t> dir(cs.T * cs.R);
    ASSERT_TRUE(cuda::get_dispatch_layout(
                    nullptr, di.get(), p,
                    {dpe.get(), dpr.get(), dir.get(), drs.get(), doff.get(), dslot.get()})
                    .ok());
    EXPECT_EQ(dpe.host(), pe) << cs.T;
    EXPECT_EQ(dpr.host(), pr) << cs.T;
    EXPECT_EQ(dir.host(), ir) << cs.T;
    EXPECT_EQ(drs.host(), rs) << cs.T;
    EXPECT_EQ(doff.host(), off) << cs.T;
    EXPECT_EQ(dslot.host(), slot) << cs.T;
  }
}

// Both twins check get_dispatch_layout's arguments with one host-side function, so each bad
// argument is refused by both with the same message (after the function's name). The checks
// run before any device call: this test needs no GPU.
TEST(cuda_twins, dispatch_layout_refuses_the_same_bad_arguments_as_the_cpu_with_its_message) {
  thread_pool pool(1);
  std::vector<int64_t> pe(4), pr(2), off(5), slot(6);
  std::vector<uint8_t> ir(6);
  const std::vector<int64_t> idx = {0, 1, 2, 3, 1, 2};
  const dispatch_layout_out outs = {pe.data(), pr.data(), ir.data()};
  struct bad {
    const int64_t* idx;
    dispatch_layout_params p;
    dispatch_layout_out out;
  };
  dispatch_layout_out no_rank_counts = outs, slot_without_offset = outs;
  no_rank_counts.num_tokens_per_rank = nullptr;
  slot_without_offset.token_expert_slot = slot.data();
  for (const bad& b :
       {bad{nullptr, {3, 2, 4, 2, 1}, outs},  // the drifted one: no table
        bad{idx.data(), {-1, 2, 4, 2, 1}, outs}, bad{idx.data(), {3, 0, 4, 2, 1}, outs},
        bad{idx.data(), {3, 2, 5, 2, 1}, outs}, bad{idx.data(), {3, 2, 4, 2, 0}, outs},
        bad{idx.data(), {3, 2, 4, 2, 1}, no_rank_counts},
        bad{idx.data(), {3, 2, 4, 2, 1}, {pe.data(), pr.data(), nullptr}},
        bad{idx.data(), {3, 2, 4, 2, 1}, slot_without_offset}}) {
    auto cpu = get_dispatch_layout(pool, b.idx, b.p, b.out);
    auto gpu = cuda::get_dispatch_layout(nullptr, b.idx, b.p, b.out);
    ASSERT_FALSE(cpu.ok());
    ASSERT_FALSE(gpu.ok()) << cpu.err().message;
    EXPECT_EQ(gpu.err().code, moerl::errc::invalid_argument);
    EXPECT_EQ(gpu.err().message, "cuda::" + cpu.err().message);
  }
}

TEST(cuda_twins, permute_unpermute_and_combine_match_the_cpu_for_vector_and_scalar_rows) {
  REQUIRE_GPU();
  thread_pool pool(2);
  // H = 300: rows move as 16-byte vectors; H = 130: rows are not 16-byte multiples.
  for (const int64_t H : {300, 130}) {
    const int64_t T = 200;
    const int K = 8, E = 32;
    auto idx = random_topk_idx(T, K, E, 11, 0.1);
    auto s = make_slots(pool, idx, T, K, E, 4);
    const int64_t R = s.num_rows;
    auto x = random_floats(T * H, 12);
    auto w = random_floats(T * K, 13, 0, 1);
    auto gout = random_floats(T * H, 14);
    std::vector<float> p(R * H), gx(T * H), u(T * K * H), gp(R * H), out(T * H), gy(R * H),
        gw(T * K);
    ASSERT_TRUE(permute_forward(pool, x.data(), s.slot.data(), T, K, H, R, p.data()).ok());
    ASSERT_TRUE(permute_backward(pool, p.data(), s.slot.data(), T, K, H, R, gx.data()).ok());
    ASSERT_TRUE(unpermute_forward(pool, p.data(), s.slot.data(), T, K, H, R, u.data()).ok());
    ASSERT_TRUE(unpermute_backward(pool, u.data(), s.slot.data(), T, K, H, R, gp.data()).ok());
    ASSERT_TRUE(
        combine_forward(pool, p.data(), s.slot.data(), w.data(), T, K, H, R, out.data()).ok());
    ASSERT_TRUE(combine_backward(pool, gout.data(), p.data(), s.slot.data(), w.data(), T, K, H, R,
                                 gy.data(), gw.data())
                    .ok());

    dev<float> dx(x), dw(w), dgout(gout), dp(R * H), dgx(T * H), du(T * K * H), dgp(R * H),
        dout(T * H), dout2(T * H), dgy(R * H), dgw(T * K);
    dev<int64_t> dslot(s.slot);
    ASSERT_TRUE(cuda::permute_forward(nullptr, dx.get(), dslot.get(), T, K, H, R, dp.get()).ok());
    ASSERT_TRUE(cuda::permute_backward(nullptr, dp.get(), dslot.get(), T, K, H, R, dgx.get()).ok());
    ASSERT_TRUE(cuda::unpermute_forward(nullptr, dp.get(), dslot.get(), T, K, H, R, du.get()).ok());
    ASSERT_TRUE(
        cuda::unpermute_backward(nullptr, du.get(), dslot.get(), T, K, H, R, dgp.get()).ok());
    ASSERT_TRUE(
        cuda::combine_forward(nullptr, dp.get(), dslot.get(), dw.get(), T, K, H, R, dout.get())
            .ok());
    ASSERT_TRUE(
        cuda::combine_forward(nullptr, dp.get(), dslot.get(), dw.get(), T, K, H, R, dout2.get())
            .ok());
    ASSERT_TRUE(cuda::combine_backward(nullptr, dgout.get(), dp.get(), dslot.get(), dw.get(), T, K,
                                       H, R, dgy.get(), dgw.get())
                    .ok());
    EXPECT_EQ(dp.host(), p);
    expect_close(dgx.host(), gx, 1e-6, "permute_backward");
    EXPECT_EQ(du.host(), u);
    EXPECT_EQ(dgp.host(), gp);
    expect_close(dout.host(), out, 1e-6, "combine_forward");
    EXPECT_EQ(dout.host(), dout2.host()) << "combine is not bitwise reproducible run to run";
    expect_close(dgy.host(), gy, 1e-6, "combine grad_expert_out");
    expect_close(dgw.host(), gw, 1e-5, "combine grad_topk_weights");
  }
}

TEST(cuda_twins, grouped_expert_ffn_matches_the_cpu) {
  REQUIRE_GPU();
  thread_pool pool(2);
  const int E = 4;
  const int64_t H = 256, F = 96;
  const std::vector<int64_t> offset = {0, 33, 33, 100, 130};
  const int64_t R = offset[E];
  auto x = random_floats(R * H, 21);
  auto wgu = random_floats(E * 2 * F * H, 22, -0.06f, 0.06f);
  auto wd = random_floats(E * H * F, 23, -0.1f, 0.1f);
  auto gy = random_floats(R * H, 24);
  std::vector<float> h(R * 2 * F), a(R * F), y(R * H), gx(R * H), gwgu(wgu.size()), gwd(wd.size());
  ASSERT_TRUE(expert_ffn_forward(pool, {E, H, F}, offset.data(), x.data(), wgu.data(), wd.data(),
                                 h.data(), a.data(), y.data())
                  .ok());
  ASSERT_TRUE(expert_ffn_backward(pool, {E, H, F}, offset.data(), x.data(), wgu.data(), wd.data(),
                                  h.data(), a.data(), gy.data(), gx.data(), gwgu.data(), gwd.data())
                  .ok());
  dev<float> dx(x), dwgu(wgu), dwd(wd), dgy(gy), dh(R * 2 * F), da(R * F), dy(R * H), dgx(R * H),
      dgwgu(wgu.size()), dgwd(wd.size());
  ASSERT_TRUE(cuda::expert_ffn_forward(nullptr, {E, H, F}, offset.data(), dx.get(), dwgu.get(),
                                       dwd.get(), dh.get(), da.get(), dy.get())
                  .ok());
  ASSERT_TRUE(cuda::expert_ffn_backward(nullptr, {E, H, F}, offset.data(), dx.get(), dwgu.get(),
                                        dwd.get(), dh.get(), da.get(), dgy.get(), dgx.get(),
                                        dgwgu.get(), dgwd.get())
                  .ok());
  expect_close(dy.host(), y, 1e-5, "ffn out");
  expect_close(dgx.host(), gx, 1e-5, "ffn grad_x");
  expect_close(dgwgu.host(), gwgu, 1e-5, "ffn grad_w_gate_up");
  expect_close(dgwd.host(), gwd, 1e-5, "ffn grad_w_down");
}

TEST(cuda_twins, fp8_quantisation_is_bit_identical_to_the_cpu) {
  REQUIRE_GPU();
  thread_pool pool(2);
  for (int64_t H : {100, 128, 7168}) {
    const int64_t R = 17, nb = fp8_num_blocks(H);
    auto x = random_floats(R * H, 31, -50, 50);
    std::vector<uint8_t> q(R * H);
    std::vector<float> sc(R * nb), back(R * H);
    ASSERT_TRUE(fp8_quantize(pool, x.data(), R, H, q.data(), sc.data()).ok());
    ASSERT_TRUE(fp8_dequantize(pool, q.data(), sc.data(), R, H, back.data()).ok());
    dev<float> dx(x), dsc(R * nb), dback(R * H);
    dev<uint8_t> dq(R * H);
    ASSERT_TRUE(cuda::fp8_quantize(nullptr, dx.get(), R, H, dq.get(), dsc.get()).ok());
    ASSERT_TRUE(cuda::fp8_dequantize(nullptr, dq.get(), dsc.get(), R, H, dback.get()).ok());
    EXPECT_EQ(dq.host(), q) << H;
    EXPECT_EQ(dsc.host(), sc) << H;
    EXPECT_EQ(dback.host(), back) << H;
  }
}

TEST(cuda_twins, bf16_storage_variants_match_the_cpu) {
  REQUIRE_GPU();
  thread_pool pool(2);
  const int64_t T = 150, H = 264;
  const int K = 4, E = 16;
  auto idx = random_topk_idx(T, K, E, 41, 0.1);
  auto s = make_slots(pool, idx, T, K, E, 2);
  const int64_t R = s.num_rows;
  auto to_bf16 = [&](const std::vector<float>& f) {
    std::vector<bf16> b(f.size());
    EXPECT_TRUE(bf16_from_float(pool, f.data(), static_cast<int64_t>(f.size()), b.data()).ok());
    return b;
  };
  auto bits = [](const std::vector<bf16>& v) {
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = v[i].bits;
    return b;
  };
  const auto xf = random_floats(T * H, 42);
  const auto x = to_bf16(xf), gout = to_bf16(random_floats(T * H, 43)),
             gu = to_bf16(random_floats(T * K * H, 44));
  const auto w = random_floats(T * K, 45, 0, 1);
  std::vector<bf16> p(R * H), gx(T * H), u(T * K * H), gp(R * H), out(T * H), gy(R * H);
  std::vector<float> gw(T * K);
  ASSERT_TRUE(permute_forward(pool, x.data(), s.slot.data(), T, K, H, R, p.data()).ok());
  ASSERT_TRUE(permute_backward(pool, p.data(), s.slot.data(), T, K, H, R, gx.data()).ok());
  ASSERT_TRUE(unpermute_forward(pool, p.data(), s.slot.data(), T, K, H, R, u.data()).ok());
  ASSERT_TRUE(unpermute_backward(pool, gu.data(), s.slot.data(), T, K, H, R, gp.data()).ok());
  ASSERT_TRUE(
      combine_forward(pool, p.data(), s.slot.data(), w.data(), T, K, H, R, out.data()).ok());
  ASSERT_TRUE(combine_backward(pool, gout.data(), p.data(), s.slot.data(), w.data(), T, K, H, R,
                               gy.data(), gw.data())
                  .ok());

  dev<bf16> dx(x), dgout(gout), dgu(gu), dp(R * H), dgx(T * H), du(T * K * H), dgp(R * H),
      dout(T * H), dgy(R * H), dxb(T * H);
  dev<float> dw(w), dgw(T * K), dxf(xf), dback(T * H);
  dev<int64_t> dslot(s.slot);
  ASSERT_TRUE(cuda::bf16_from_float(nullptr, dxf.get(), T * H, dxb.get()).ok());
  ASSERT_TRUE(cuda::bf16_to_float(nullptr, dxb.get(), T * H, dback.get()).ok());
  ASSERT_TRUE(cuda::permute_forward(nullptr, dx.get(), dslot.get(), T, K, H, R, dp.get()).ok());
  ASSERT_TRUE(cuda::permute_backward(nullptr, dp.get(), dslot.get(), T, K, H, R, dgx.get()).ok());
  ASSERT_TRUE(cuda::unpermute_forward(nullptr, dp.get(), dslot.get(), T, K, H, R, du.get()).ok());
  ASSERT_TRUE(
      cuda::unpermute_backward(nullptr, dgu.get(), dslot.get(), T, K, H, R, dgp.get()).ok());
  ASSERT_TRUE(
      cuda::combine_forward(nullptr, dp.get(), dslot.get(), dw.get(), T, K, H, R, dout.get()).ok());
  ASSERT_TRUE(cuda::combine_backward(nullptr, dgout.get(), dp.get(), dslot.get(), dw.get(), T, K, H,
                                     R, dgy.get(), dgw.get())
                  .ok());
  EXPECT_EQ(bits(dxb.host()), bits(x));
  std::vector<float> back(T * H);
  ASSERT_TRUE(bf16_to_float(pool, x.data(), T * H, back.data()).ok());
  EXPECT_EQ(dback.host(), back);
  EXPECT_EQ(bits(dp.host()), bits(p));
  EXPECT_EQ(bits(dgx.host()), bits(gx));  // sums of up to topk values in k order, rounded once
  EXPECT_EQ(bits(du.host()), bits(u));
  EXPECT_EQ(bits(dgp.host()), bits(gp));
  EXPECT_EQ(bits(dout.host()), bits(out));  // same k-ordered, explicitly rounded sum as the CPU
  EXPECT_EQ(bits(dgy.host()), bits(gy));
  expect_close(dgw.host(), gw, 1e-5, "bf16 combine grad_topk_weights");

  // Grouped FFN with bf16 storage.
  const int FE = 3;
  const int64_t FH = 128, FF = 64;
  const std::vector<int64_t> offset = {0, 20, 20, 45};
  const auto fx = to_bf16(random_floats(45 * FH, 46)),
             fwgu = to_bf16(random_floats(FE * 2 * FF * FH, 47, -0.1f, 0.1f)),
             fwd = to_bf16(random_floats(FE * FH * FF, 48, -0.1f, 0.1f));
  std::vector<bf16> fy(45 * FH);
  ASSERT_TRUE(expert_ffn_forward(pool, {FE, FH, FF}, offset.data(), fx.data(), fwgu.data(),
                                 fwd.data(), fy.data())
                  .ok());
  dev<bf16> dfx(fx), dfwgu(fwgu), dfwd(fwd), dfy(45 * FH);
  ASSERT_TRUE(cuda::expert_ffn_forward(nullptr, {FE, FH, FF}, offset.data(), dfx.get(), dfwgu.get(),
                                       dfwd.get(), dfy.get())
                  .ok());
  std::vector<float> cpu_y(45 * FH), gpu_y(45 * FH);
  const auto gy_bf16 = dfy.host();
  ASSERT_TRUE(bf16_to_float(pool, fy.data(), 45 * FH, cpu_y.data()).ok());
  ASSERT_TRUE(bf16_to_float(pool, gy_bf16.data(), 45 * FH, gpu_y.data()).ok());
  expect_close(gpu_y, cpu_y, 1e-2, "bf16 ffn out");
}

TEST(cuda_twins, batched_row_copies_match_the_cpu_for_vector_and_byte_rows) {
  REQUIRE_GPU();
  thread_pool pool(1);
  int64_t dst_bytes = 0, src_bytes = 0;
  // More copies than the grid's 65535 blocks, so blocks stride over copies too.
  const auto offsets = random_copy_offsets(70000, 41, &dst_bytes, &src_bytes);
  std::vector<char> src(static_cast<size_t>(src_bytes)), dst(static_cast<size_t>(dst_bytes), '#');
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 13 + 5);
  dev<char> dsrc(src), ddst(dst);
  const auto cpu = plan_on(offsets, dst.data(), src.data());
  const auto gpu = plan_on(offsets, ddst.get(), dsrc.get());
  ASSERT_TRUE(copy_rows(pool, cpu.data(), static_cast<int64_t>(cpu.size())).ok());
  ASSERT_TRUE(cuda::copy_rows(nullptr, gpu.data(), static_cast<int64_t>(gpu.size())).ok());
  EXPECT_EQ(ddst.host(), dst);
  const row_copy bad[] = {{ddst.get(), nullptr, 4}};
  auto st = cuda::copy_rows(nullptr, bad, 1);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.err().message, "cuda::copy_rows: copy 0 of 4 bytes has a null src");
}

TEST(cuda_twins, combine_by_row_pointers_matches_the_cpu) {
  REQUIRE_GPU();
  thread_pool pool(2);
  // Terms in two buffers, some missing (nullptr), as fabric's low-latency combine reads them.
  const int64_t T = 37, H = 130, R = 50;
  const int K = 4;
  auto a = random_floats(R * H, 51), b = random_floats(R * H, 52),
       w = random_floats(T * K, 53, 0, 1);
  dev<float> da(a), db(b), dw(w), dout(T * H);
  std::vector<const float*> cpu_rows(T * K), gpu_rows(T * K);
  for (int64_t i = 0; i < T * K; ++i) {
    const int64_t r = (i * 7) % R;
    const bool none = i % 5 == 3, first = i % 2 == 0;
    cpu_rows[i] = none ? nullptr : (first ? a.data() : b.data()) + r * H;
    gpu_rows[i] = none ? nullptr : (first ? da.get() : db.get()) + r * H;
  }
  std::vector<float> out(T * H);
  ASSERT_TRUE(combine_rows_forward(pool, cpu_rows.data(), w.data(), T, K, H, out.data()).ok());
  std::vector<uintptr_t> table(gpu_rows.size());
  for (size_t i = 0; i < table.size(); ++i) table[i] = reinterpret_cast<uintptr_t>(gpu_rows[i]);
  dev<uintptr_t> dtable(table);
  ASSERT_TRUE(cuda::combine_rows_forward(nullptr,
                                         reinterpret_cast<const float* const*>(dtable.get()),
                                         dw.get(), T, K, H, dout.get())
                  .ok());
  expect_close(dout.host(), out, 1e-6, "combine_rows_forward");
}
