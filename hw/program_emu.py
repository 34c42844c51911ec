"""The micro-program emulator: ``emulate`` runs a ``hw.program.Program`` with the fixed-point model's
functions (the same calls ``FixedModel`` makes), op by op over a Python VRF, so a program bug shows up
before any RTL runs (verification/test_chip_units.py compares it with ``FixedModel``)."""
from __future__ import annotations

import numpy as np

from hw.kda_params import Sel as KdaSel
from hw.program import LANES, Opc, Program
from hw.vector_unit import EwOp as EwKind
from nano_k3.tensors import record_names


def emulate(prog: Program, weights, tokens, trace: list | None = None) -> np.ndarray:
    """Run ``prog`` with the fixed-point model's functions; returns int32 logits (T, vocab).

    ``trace`` (a list) receives, per position, {op index: the vector the op wrote to its VRF slot}."""
    from nano_k3 import fixed as F
    from nano_k3.fxp_math import rmsnorm
    from nano_k3.fxp_ops import ACC_FRAC, X, embed_row, mac_input, matvec
    from nano_k3.int4 import dequant_matvec

    cfg = prog.cfg
    fm = F.FixedModel(weights)
    names = record_names(cfg)
    rows = []
    for pos, tok in enumerate(tokens):
        vrf: dict = {}
        prf = [None, None]
        choice, rw = None, None
        kseg: dict = {}
        mseg: list = []
        written: dict = {}
        for k, op in enumerate(prog.ops):
            if op.opc == Opc.EMB:
                q, s, z, g = fm.mats["emb"]
                vrf[op.dst] = embed_row(q[tok], s[tok], z[tok], g)
            elif op.opc == Opc.MV:
                rec = op.rec + (9 * int(choice[op.expert - 1]) if op.expert else 0)
                q, s, z, g = fm.mats[names[rec][:-2]]
                v = vrf[op.srcs[0]][:op.fan_in]
                if op.head:
                    m, mf = mac_input(v, X.frac)
                    rows.append(F.logits_out(dequant_matvec(m, q, s, z, g), mf + ACC_FRAC).astype(np.int32))
                else:
                    y = matvec(*mac_input(v, X.frac), q, s, z, g)
                    vrf[op.dst] = X.fit(vrf[op.srcs[1]][:op.fan_out] + y, X.frac) if op.res else y
            elif op.opc == Opc.PLD:
                prf[op.prf] = fm.p[names[op.rec]].reshape(-1)
            elif op.opc == Opc.RMS:
                vrf[op.dst] = rmsnorm(vrf[op.srcs[0]][:op.n], X.frac, prf[0][:op.n])
            elif op.opc == Opc.MIX:
                vrf[op.dst], _ = F.residual_mix(np.stack([vrf[s][:op.n] for s in op.srcs]), prf[0], prf[1])
            elif op.opc == Opc.EW:
                a, b = (vrf[s][:op.n] for s in op.srcs)
                vrf[op.dst] = X.fit(a + b, X.frac) if op.ewop == EwKind.ADD else F.expert_hidden(a, b)
            elif op.opc == Opc.ROUTE:
                scores = F.router_scores(vrf[op.srcs[0]][:op.n])
                choice = F.router_select(scores, prf[0], cfg.top_k)
                rw = F.router_weights(scores[choice])
            elif op.opc == Opc.COMB:
                moe = F.moe_combine(vrf[op.srcs[0]], np.stack([vrf[s] for s in op.srcs[1:-1]]), rw)
                vrf[op.dst] = X.fit(vrf[op.srcs[-1]][:op.n] + moe, X.frac)
            elif op.opc == Opc.KDA:
                kseg[op.sel] = (vrf[op.srcs[0]][:op.n].copy(), None if prf[0] is None else prf[0].copy(),
                                None if prf[1] is None else prf[1].copy())
                if op.last:
                    vrf[op.dst] = _emulate_kda(cfg, fm, op.layer, kseg, pos)
            elif op.opc == Opc.MLA:
                v = vrf[op.srcs[0]]
                v = np.concatenate([v, np.zeros(max(0, (op.w0 + op.nw) * LANES - v.size), np.int64)])
                mseg.append(v[op.w0 * LANES:(op.w0 + op.nw) * LANES])
                if op.last:
                    vrf[op.dst] = _emulate_mla(cfg, fm, mseg, pos)
            if op.opc not in (Opc.END, Opc.PLD, Opc.ROUTE) and op.head == 0 and (op.opc not in (Opc.KDA, Opc.MLA) or op.last):
                written[k] = np.asarray(vrf[op.dst]).copy()
            elif op.opc == Opc.ROUTE:
                written[k] = (np.asarray(choice).copy(), np.asarray(rw).copy())
            elif op.opc == Opc.END:
                break
        if trace is not None:
            trace.append(written)
    return np.stack(rows)


def _emulate_kda(cfg, fm, layer, seg, pos):
    from nano_k3 import fixed as F
    from nano_k3.fxp_math import l2norm
    from nano_k3.fxp_ops import X
    from nano_k3.config import L2_EPS
    H, dh, K, P = cfg.kda_heads, cfg.kda_dh, cfg.conv_k, cfg.kda_width
    st = fm.__dict__.setdefault("_emu_kda", {})
    if pos == 0 or layer not in st:
        st[layer] = [np.zeros((3, K - 1, P), np.int64), np.zeros((H, dh, dh), np.int64)]
    hist, S_ = st[layer]
    pre = np.stack([seg[s][0] for s in (KdaSel.Q, KdaSel.K, KdaSel.V)])
    taps = np.stack([seg[s][1][:P * K].reshape(P, K) for s in (KdaSel.Q, KdaSel.K, KdaSel.V)])
    window = np.concatenate([hist, pre[:, None, :]], axis=1)
    q, k, v = (F.kda_conv(window[j], taps[j]) for j in range(3))
    st[layer][0] = window[:, 1:]
    beta = F.kda_beta(seg[KdaSel.B][0])
    f, dtb, A = seg[KdaSel.F]
    alpha = F.kda_alpha(f.reshape(H, dh), A[:H], dtb[:P].reshape(H, dh))
    z, w, _ = seg[KdaSel.Z]
    qh, kh = l2norm(q.reshape(H, dh), X.frac, L2_EPS), l2norm(k.reshape(H, dh), X.frac, L2_EPS)
    st[layer][1], read = F.kda_state_update(S_, qh, kh, v.reshape(H, dh), beta, alpha)
    return F.gated_norm(read, z.reshape(H, dh), w[:dh]).reshape(-1)


def _emulate_mla(cfg, fm, segs, pos):
    from nano_k3 import fixed as F
    H, dk, dr, dv = cfg.mla_heads, cfg.mla_dk, cfg.mla_dr, cfg.mla_dv
    st = fm.__dict__.setdefault("_emu_mla", {})
    if pos == 0:
        st["k"], st["v"] = [], []
    it = iter(segs)
    q = []
    for _ in range(H):
        q.append(np.concatenate([next(it)[:dk], next(it)[:dr]]))
    kc = [next(it)[:dk] for _ in range(H)]
    kr = next(it)[:dr]
    v = [next(it)[:dv] for _ in range(H)]
    st["k"].append(np.stack([np.concatenate([kc[h], kr]) for h in range(H)]))
    st["v"].append(np.stack(v))
    ctx, _, _ = F.mla_attention(np.stack(q), np.stack(st["k"]), np.stack(st["v"]), F.mla_score_const(dk + dr))
    return ctx.reshape(-1)
