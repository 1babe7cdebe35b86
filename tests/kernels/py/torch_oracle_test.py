"""PyTorch is the oracle for moerl's kernels/ CPU primitives.

For random seeds and shapes this builds inputs, computes golden outputs and gradients with
torch (autograd, float64 from the same float32 inputs, so the reference error is far below
the tolerance), runs the C++ kernels through the moerl_kernels_py pybind11 module, and
compares: fp32 within 1e-5 relative, bf16 within 1e-2, FP8 exactly against a reference
encoder and within the format's error of the input. "Relative" is taken per element with
an absolute floor of 1e-5 times the tensor's largest magnitude, because an element that
cancels to ~0 has no meaningful relative error.

Run by CTest as `/usr/bin/python3 -m pytest` (Debian's python3-torch).
"""
import numpy as np
import pytest
import torch

import moerl_kernels_py as K

FP32_RTOL = 1e-5
BF16_RTOL = 1e-2


def assert_close(actual, expected, rtol, what):
    a = torch.as_tensor(np.asarray(actual)).double()
    e = torch.as_tensor(np.asarray(expected)).double() if not torch.is_tensor(expected) else expected.detach().double()
    assert a.shape == e.shape, f"{what}: shape {tuple(a.shape)} != {tuple(e.shape)}"
    if e.numel() == 0:
        return
    floor = rtol * e.abs().max().item()
    err = (a - e).abs()
    bad = err > rtol * e.abs() + floor
    assert not bool(bad.any()), (
        f"{what}: {int(bad.sum())} of {e.numel()} elements off, worst abs error "
        f"{err.max().item():.3e} (rtol {rtol}, floor {floor:.3e})")


def bf16_bits(t):
    """torch bf16 tensor -> uint16 numpy array of its bits."""
    return t.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def from_bf16_bits(a):
    return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)


def random_topk_idx(gen, T, K_, E, masked=0.0):
    idx = torch.stack([torch.randperm(E, generator=gen)[:K_] for _ in range(T)]) if T else torch.zeros(0, K_, dtype=torch.long)
    if masked:
        idx[torch.rand(idx.shape, generator=gen) < masked] = -1
    return idx


# ---- routing ---------------------------------------------------------------------------

def torch_route(logits, bias, mask, topk, scoring, G, TG, renorm, scale):
    T, E = logits.shape
    scores = torch.softmax(logits, -1) if scoring == "softmax" else torch.sigmoid(logits)
    sel = scores.detach() + (bias if bias is not None else 0)
    if G > 1:
        per = E // G
        gs = sel.view(T, G, per).topk(min(2, per), dim=-1).values.sum(-1)
        keep = torch.zeros(T, G, dtype=torch.bool).scatter(1, gs.topk(TG, dim=-1).indices, True)
        sel = sel.masked_fill(~keep.repeat_interleave(per, dim=1), float("-inf"))
    idx = sel.topk(topk, dim=-1).indices
    w = scores.gather(1, idx)
    if renorm:
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
    w = w * scale
    if mask is not None:
        m = torch.from_numpy(mask).bool().unsqueeze(-1)
        idx = torch.where(m, idx, torch.full_like(idx, -1))
        w = torch.where(m, w, torch.zeros_like(w))
    return scores, idx, w


ROUTING_CASES = [
    # (T, E, topk, scoring, groups, topk_groups, renorm, scale, bias, masked)
    (64, 16, 4, "softmax", 1, 1, True, 1.0, False, False),
    (50, 32, 8, "sigmoid", 8, 4, True, 2.5, True, True),     # DeepSeek-V3 style
    (33, 8, 2, "softmax", 1, 1, False, 1.0, False, True),
    (17, 6, 6, "sigmoid", 1, 1, True, 1.0, False, False),    # topk == num_experts
    (0, 8, 2, "softmax", 1, 1, True, 1.0, False, False),     # zero tokens
    (40, 16, 3, "softmax", 4, 2, False, 0.5, True, False),
]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("case", ROUTING_CASES)
def test_routing_forward_and_backward_match_torch(seed, case):
    T, E, topk, scoring, G, TG, renorm, scale, use_bias, use_mask = case
    gen = torch.Generator().manual_seed(seed)
    logits32 = torch.randn(T, E, generator=gen) * 2
    bias = (torch.randn(E, generator=gen) * 0.1) if use_bias else None
    mask = (torch.rand(T, generator=gen) > 0.2).to(torch.uint8).numpy() if use_mask else None
    gw = torch.randn(T, topk, generator=gen)
    extra = torch.randn(T, E, generator=gen)

    s, idx, w = K.route_forward(logits32.numpy(), None if bias is None else bias.numpy(), mask,
                                topk, scoring, G, TG, renorm, scale)
    logits = logits32.double().requires_grad_()
    rs, ridx, rw = torch_route(logits, None if bias is None else bias.double(), mask, topk,
                               scoring, G, TG, renorm, scale)
    assert np.array_equal(idx, ridx.numpy()), "topk_idx differs from torch"
    assert_close(s, rs, FP32_RTOL, "scores")
    assert_close(w, rw, FP32_RTOL, "topk_weights")

    ((rw * gw.double()).sum() + (rs * extra.double()).sum()).backward()
    gl = K.route_backward(s, idx, gw.numpy(), extra.numpy(), scoring, G, TG, renorm, scale)
    assert_close(gl, logits.grad, FP32_RTOL, "grad_logits")


def test_routing_rejects_a_bad_scoring_function_and_bad_groups_with_clear_errors():
    x = np.zeros((2, 8), np.float32)
    with pytest.raises(ValueError, match="scoring"):
        K.route_forward(x, None, None, 2, "relu", 1, 1, True, 1.0)
    with pytest.raises(ValueError, match="num_groups = 3"):
        K.route_forward(x, None, None, 2, "softmax", 3, 1, True, 1.0)


# ---- load statistics ---------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_aux_loss_and_gradient_match_torch(seed):
    gen = torch.Generator().manual_seed(seed)
    T, E, topk, coeff = 48, 16, 4, 0.01
    scores32 = torch.softmax(torch.randn(T, E, generator=gen), -1)
    idx = random_topk_idx(gen, T, topk, E)
    idx[5] = -1  # a padding token
    loss, grad, counts, imbalance = K.load_balance_loss(scores32.numpy(), idx.numpy(), coeff)

    scores = scores32.double().requires_grad_()
    routed = (idx >= 0).any(-1)
    n = routed.sum()
    valid = idx[idx >= 0]
    cnt = torch.bincount(valid, minlength=E).double()
    f = cnt / (n * topk)
    P = scores[routed].sum(0) / n
    ref = coeff * E * (f * P).sum()
    ref.backward()
    assert counts == cnt.long().tolist()
    assert abs(loss - ref.item()) <= FP32_RTOL * abs(ref.item())
    assert_close(grad, scores.grad, FP32_RTOL, "grad_scores")
    assert imbalance == pytest.approx(cnt.max().item() / cnt.mean().item())


# ---- dispatch layout -----------------------------------------------------------------------

def torch_layout(idx, E, R, align):
    T, K_ = idx.shape
    per_rank = E // R
    flat = idx.reshape(-1)
    valid = flat >= 0
    per_expert = torch.bincount(flat[valid], minlength=E)
    in_rank = torch.zeros(T, R, dtype=torch.uint8)
    for r in range(R):
        in_rank[:, r] = ((idx >= 0) & (idx // per_rank == r)).any(-1).to(torch.uint8) if T else in_rank[:, r]
    per_rank_count = in_rank.long().sum(0)
    rank_slot = torch.where(in_rank.bool(), in_rank.long().cumsum(0) - 1, torch.full((T, R), -1, dtype=torch.long))
    padded = (per_expert + align - 1) // align * align
    offset = torch.cat([torch.zeros(1, dtype=torch.long), padded.cumsum(0)])
    key = torch.where(valid, flat, torch.full_like(flat, E))
    order = torch.sort(key, stable=True).indices
    slot = torch.full_like(flat, -1)
    starts = torch.cat([torch.zeros(1, dtype=torch.long), per_expert.cumsum(0)])
    for pos, entry in enumerate(order.tolist()):
        e = int(key[entry])
        if e < E:
            slot[entry] = offset[e] + (pos - starts[e])
    return per_expert, per_rank_count, in_rank, rank_slot, offset, slot.view(T, K_)


LAYOUT_CASES = [
    # (T, K, E, R, align, kind)
    (100, 8, 32, 4, 1, "random"),
    (64, 4, 16, 8, 4, "masked"),
    (0, 8, 16, 4, 1, "random"),          # zero tokens
    (50, 2, 8, 2, 1, "one_expert"),      # all tokens to one expert (the other entry masked)
    (30, 8, 8, 4, 8, "random"),          # topk == num_experts
    (40, 4, 16, 2, 1, "same_rank"),      # every token's top-k on one rank
]


@pytest.mark.parametrize("case", LAYOUT_CASES)
def test_dispatch_layout_matches_torch(case):
    T, K_, E, R, align, kind = case
    gen = torch.Generator().manual_seed(T * 7 + K_)
    idx = random_topk_idx(gen, T, K_, E, masked=0.3 if kind == "masked" else 0.0)
    if kind == "one_expert":
        idx[:, 0] = 3
        idx[:, 1:] = -1
    if kind == "same_rank":
        per = E // R
        idx = torch.stack([torch.randperm(per, generator=gen)[:K_] for _ in range(T)]) + per
    got = K.dispatch_layout(idx.numpy(), E, R, align)
    pe, pr, ir, rs, off, slot = torch_layout(idx, E, R, align)
    assert np.array_equal(got["num_tokens_per_expert"], pe.numpy())
    assert np.array_equal(got["num_tokens_per_rank"], pr.numpy())
    assert np.array_equal(got["is_token_in_rank"], ir.numpy())
    assert np.array_equal(got["token_rank_slot"], rs.numpy())
    assert np.array_equal(got["expert_offset"], off.numpy())
    assert np.array_equal(got["token_expert_slot"], slot.numpy())


def test_dispatch_layout_names_a_bad_expert_id():
    idx = np.array([[0, 1], [2, 99]], np.int64)
    with pytest.raises(ValueError, match=r"topk_idx\[1, 1\] = 99"):
        K.dispatch_layout(idx, 8, 2, 1)


# ---- permute / unpermute / combine ---------------------------------------------------------

def make_routing(seed, T, K_, E, H, masked, align=1):
    gen = torch.Generator().manual_seed(seed)
    idx = random_topk_idx(gen, T, K_, E, masked)
    lay = K.dispatch_layout(idx.numpy(), E, 1, align)
    slot = torch.from_numpy(lay["token_expert_slot"])
    rows = int(lay["expert_offset"][-1])
    return gen, slot, rows


def torch_permute(x, slot, rows):
    T, K_ = slot.shape
    out = torch.zeros(rows, x.shape[1], dtype=x.dtype)
    tok = torch.arange(T).unsqueeze(1).expand(T, K_)
    v = slot >= 0
    return out.index_put((slot[v],), x[tok[v]])


def torch_combine(y, slot, w):
    v = (slot >= 0).unsqueeze(-1).to(y.dtype)
    return (w.unsqueeze(-1) * y[slot.clamp(min=0)] * v).sum(1)


SHAPES = [
    # (T, K, E, H, masked, align)
    (64, 8, 32, 256, 0.0, 1),
    (37, 4, 8, 200, 0.25, 4),   # hidden not a multiple of 128, padding rows
    (0, 2, 4, 64, 0.0, 1),      # zero tokens
    (20, 6, 6, 130, 0.0, 1),    # topk == num_experts
]


@pytest.mark.parametrize("shape", SHAPES)
def test_permute_and_unpermute_forward_backward_match_torch(shape):
    T, K_, E, H, masked, align = shape
    gen, slot, rows = make_routing(1, T, K_, E, H, masked, align)
    x32 = torch.randn(T, H, generator=gen)
    gp = torch.randn(rows, H, generator=gen)
    x = x32.double().requires_grad_()
    ref = torch_permute(x, slot, rows)
    got = K.permute_forward(x32.numpy(), slot.numpy(), rows)
    assert_close(got, ref, FP32_RTOL, "permuted")
    (ref * gp.double()).sum().backward()
    assert_close(K.permute_backward(gp.numpy(), slot.numpy()), x.grad, FP32_RTOL, "grad_x")

    p = torch.from_numpy(got).double().requires_grad_()
    u_ref = torch.where((slot >= 0).unsqueeze(-1), p[slot.clamp(min=0)], torch.zeros(()).double())
    u = K.unpermute_forward(got, slot.numpy())
    assert_close(u, u_ref, FP32_RTOL, "unpermuted")
    gu = torch.randn(T, K_, H, generator=gen)
    (u_ref * gu.double()).sum().backward()
    assert_close(K.unpermute_backward(gu.numpy(), slot.numpy(), rows), p.grad, FP32_RTOL, "grad_permuted")

    # bf16 storage: a pure copy, so bits must match torch's bf16 permute exactly.
    xb = x32.to(torch.bfloat16)
    gotb = from_bf16_bits(K.permute_forward_bf16(bf16_bits(xb), slot.numpy(), rows))
    assert torch.equal(gotb.view(torch.int16), torch_permute(xb.float(), slot, rows).to(torch.bfloat16).view(torch.int16))


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("shape", SHAPES)
def test_combine_forward_backward_match_torch_fp32_and_bf16(seed, shape):
    T, K_, E, H, masked, align = shape
    gen, slot, rows = make_routing(seed, T, K_, E, H, masked, align)
    y32 = torch.randn(rows, H, generator=gen)
    w32 = torch.rand(T, K_, generator=gen)
    gout = torch.randn(T, H, generator=gen)

    y = y32.double().requires_grad_()
    w = w32.double().requires_grad_()
    ref = torch_combine(y, slot, w)
    got = K.combine_forward(y32.numpy(), slot.numpy(), w32.numpy())
    assert_close(got, ref, FP32_RTOL, "combine out")
    (ref * gout.double()).sum().backward()
    gy, gw = K.combine_backward(gout.numpy(), y32.numpy(), slot.numpy(), w32.numpy())
    assert_close(gy, y.grad, FP32_RTOL, "grad_expert_out")
    assert_close(gw, w.grad, FP32_RTOL, "grad_topk_weights")

    # Bitwise reproducible run to run.
    assert np.array_equal(got, K.combine_forward(y32.numpy(), slot.numpy(), w32.numpy()))

    yb, gb = y32.to(torch.bfloat16), gout.to(torch.bfloat16)
    outb = from_bf16_bits(K.combine_forward_bf16(bf16_bits(yb), slot.numpy(), w32.numpy()))
    assert_close(outb.float().numpy(), torch_combine(yb.double(), slot, w32.double()), BF16_RTOL, "bf16 combine out")
    gyb, gwb = K.combine_backward_bf16(bf16_bits(gb), bf16_bits(yb), slot.numpy(), w32.numpy())
    yd = yb.double().requires_grad_()
    wd = w32.double().requires_grad_()
    (torch_combine(yd, slot, wd) * gb.double()).sum().backward()
    assert_close(from_bf16_bits(gyb).float().numpy(), yd.grad, BF16_RTOL, "bf16 grad_expert_out")
    assert_close(gwb, wd.grad, BF16_RTOL, "bf16 grad_topk_weights")


# ---- grouped expert FFN --------------------------------------------------------------------

def torch_ffn(x, offset, wgu, wd):
    F = wgu.shape[1] // 2
    outs = []
    for e in range(wgu.shape[0]):
        xe = x[offset[e]:offset[e + 1]]
        h = xe @ wgu[e].t()
        a = torch.nn.functional.silu(h[:, :F]) * h[:, F:]
        outs.append(a @ wd[e].t())
    return torch.cat(outs) if outs else x[:0]


FFN_CASES = [
    # (counts per expert, H, F)
    ([5, 0, 17, 1], 130, 48),     # an empty expert, hidden not a multiple of 128
    ([64, 64], 256, 128),
    ([0, 0, 0], 64, 32),          # no rows at all
    ([40], 96, 80),               # all tokens on one expert
]


@pytest.mark.parametrize("case", FFN_CASES)
def test_grouped_expert_ffn_forward_backward_match_torch(case):
    counts, H, F = case
    gen = torch.Generator().manual_seed(sum(counts) + H)
    E = len(counts)
    offset = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    R = int(offset[-1])
    x32 = torch.randn(R, H, generator=gen)
    wgu32 = torch.randn(E, 2 * F, H, generator=gen) / H ** 0.5
    wd32 = torch.randn(E, H, F, generator=gen) / F ** 0.5
    gy = torch.randn(R, H, generator=gen)

    y, h, a = K.expert_ffn_forward(x32.numpy(), offset, wgu32.numpy(), wd32.numpy())
    x, wgu, wd = (t.double().requires_grad_() for t in (x32, wgu32, wd32))
    ref = torch_ffn(x, offset, wgu, wd)
    assert_close(y, ref, FP32_RTOL, "ffn out")
    (ref * gy.double()).sum().backward()
    gx, gwgu, gwd = K.expert_ffn_backward(x32.numpy(), offset, wgu32.numpy(), wd32.numpy(), h, a, gy.numpy())
    assert_close(gx, x.grad, FP32_RTOL, "ffn grad_x")
    assert_close(gwgu, wgu.grad, FP32_RTOL, "ffn grad_w_gate_up")
    assert_close(gwd, wd.grad, FP32_RTOL, "ffn grad_w_down")

    xb, wgub, wdb = (t.to(torch.bfloat16) for t in (x32, wgu32, wd32))
    yb = from_bf16_bits(K.expert_ffn_forward_bf16(bf16_bits(xb), offset, bf16_bits(wgub), bf16_bits(wdb)))
    assert_close(yb.float().numpy(), torch_ffn(xb.double(), offset, wgub.double(), wdb.double()), BF16_RTOL, "bf16 ffn out")


# ---- FP8 -----------------------------------------------------------------------------------

def torch_e4m3_round(v):
    """Round float32 values to the e4m3fn grid (nearest, ties to even), saturating at 448."""
    a = v.abs().clamp(max=448.0)
    _, e = torch.frexp(a)
    exp = (e - 1).clamp(min=-6)                 # subnormals share 2^-6's step
    step = torch.pow(2.0, (exp - 3).float())
    q = torch.round(a / step) * step            # torch.round is half-to-even
    return torch.sign(v) * q.clamp(max=448.0)


@pytest.mark.parametrize("H", [1, 100, 128, 300, 7168])
def test_fp8_block_quantisation_matches_a_reference_encoder_and_the_format_error(H):
    gen = torch.Generator().manual_seed(H)
    rows = 4
    x = torch.randn(rows, H, generator=gen) * torch.logspace(-3, 3, rows).unsqueeze(1)
    x[0, :min(H, 128)] = 0  # an all-zero block gets scale 1
    q, s = K.fp8_quantize(x.numpy())
    back = torch.from_numpy(K.fp8_dequantize(q, s))
    nb = (H + 127) // 128
    assert s.shape == (rows, nb)
    blocks = torch.nn.functional.pad(x.abs(), (0, nb * 128 - H)).view(rows, nb, 128).amax(-1)
    ref_s = torch.where(blocks > 0, blocks / 448.0, torch.ones(()))
    assert torch.equal(torch.from_numpy(s), ref_s)
    s_full = ref_s.repeat_interleave(128, dim=1)[:, :H]
    ref = torch_e4m3_round(x / s_full) * s_full
    assert torch.equal(back, ref)
    # Within e4m3's error: half a step of 3 mantissa bits (2^-4 relative) or of the
    # subnormal grid (2^-10 of the scale).
    tol = torch.maximum(x.abs() * 2 ** -4, s_full * 2 ** -10) * 1.0001
    assert bool(((back - x).abs() <= tol).all())
