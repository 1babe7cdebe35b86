#!/usr/bin/python3
"""Independent PyTorch (float64) reimplementation of moerl's MoE policy forward pass.

Reads the fixture written by torch_reference_test.cpp (parameters, tokens, padding mask, the
loss weights R, and C++'s logits, aux loss and gradients), recomputes
loss = sum(logits * R) + aux_loss with autograd, and exits non-zero naming the first tensor
whose value or gradient disagrees. Semantics mirrored from policy/model.h and kernels/:
pre-norm RMSNorm blocks, causal softmax attention, softmax top-k routing with renormalised
weights, SwiGLU experts (w_gate_up [E, 2F, d]: gate rows first; w_down [E, d, F]),
Switch load-balance loss with f_e not differentiated; padding visits no expert.
"""
import json
import sys

import torch

torch.set_default_dtype(torch.float64)


def rms(x, g, eps=1e-5):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * g


def forward(P, cfg, tok, mask):
    b, t = tok.shape
    d, H, L = cfg["d_model"], cfg["num_heads"], cfg["num_layers"]
    E, K, F = cfg["num_experts"], cfg["top_k"], cfg["ffn_dim"]
    dh = d // H
    x = P["tok_emb"][tok] + P["pos_emb"][:t][None]
    aux = torch.zeros(())
    causal = torch.tril(torch.ones(t, t, dtype=torch.bool))
    m = mask.reshape(-1)
    for l in range(L):
        pre = f"layer{l}."
        h = rms(x, P[pre + "norm1"])
        qkv = h @ P[pre + "attn.wqkv"]
        q, k, v = [z.reshape(b, t, H, dh).transpose(1, 2) for z in qkv.split(d, dim=-1)]
        s = (q @ k.transpose(-1, -2)) / dh ** 0.5
        s = s.masked_fill(~causal, float("-inf"))
        o = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + o @ P[pre + "attn.wo"]
        h2 = rms(x, P[pre + "norm2"]).reshape(b * t, d)
        scores = torch.softmax(h2 @ P[pre + "moe.router"], -1)
        topv, topi = scores.topk(K, dim=-1)
        w = topv / topv.sum(-1, keepdim=True)
        y = torch.zeros_like(h2)
        wgu, wd = P[pre + "moe.w_gate_up"], P[pre + "moe.w_down"]
        for e in range(E):
            for j in range(K):
                sel = ((topi[:, j] == e) & m).nonzero().flatten()
                if len(sel) == 0:
                    continue
                gu = h2[sel] @ wgu[e].T
                a = torch.nn.functional.silu(gu[:, :F]) * gu[:, F:]
                y = y.index_add(0, sel, w[sel, j:j + 1] * (a @ wd[e].T))
        n_routed = m.sum()
        if cfg["aux_loss_coef"] > 0 and n_routed > 0:
            counts = torch.stack([((topi == e) & m[:, None]).sum() for e in range(E)]).to(torch.float64)
            f = counts / (n_routed * K)
            pe = scores[m].sum(0) / n_routed
            aux = aux + cfg["aux_loss_coef"] * E * (f * pe).sum()
        x = x + y.reshape(b, t, d)
    logits = rms(x, P["norm_f"]) @ P["head"]
    return logits.reshape(b * t, -1), aux


def main():
    fx = json.load(open(sys.argv[1]))
    cfg = fx["config"]
    P = {}
    for name, spec in fx["params"].items():
        P[name] = torch.tensor(spec["data"]).reshape(spec["dims"]).requires_grad_(True)
    tok = torch.tensor(fx["tokens"]).reshape(fx["batch"], fx["seq_len"])
    mask = torch.tensor(fx["mask"], dtype=torch.bool).reshape(fx["batch"], fx["seq_len"])
    R = torch.tensor(fx["R"]).reshape(fx["batch"] * fx["seq_len"], -1)
    logits, aux = forward(P, cfg, tok, mask)
    loss = (logits * R).sum() + aux
    loss.backward()

    failures = []

    def close(name, got, want, rtol, atol):
        got = torch.tensor(got).reshape(want.shape)
        err = (got - want).abs()
        bad = err > atol + rtol * want.abs()
        if bad.any():
            i = int(bad.flatten().nonzero()[0])
            failures.append(f"{name}: element {i}: C++ {got.flatten()[i].item():.6g} vs torch "
                            f"{want.flatten()[i].item():.6g} ({int(bad.sum())} of {bad.numel()} differ)")

    close("logits", fx["logits"], logits.detach(), 1e-4, 1e-4)
    close("aux_loss", [fx["aux_loss"]], aux.detach().reshape(1), 1e-4, 1e-6)
    for name, spec in fx["params"].items():
        close("grad " + name, fx["grads"][name], P[name].grad, 2e-3, 2e-4)
    for f in failures:
        print("MISMATCH", f)
    print(f"compared logits, aux loss and {len(P)} gradient tensors: "
          f"{'all agree' if not failures else str(len(failures)) + ' disagree'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
