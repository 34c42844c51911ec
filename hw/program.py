"""The chip's micro-program: ``FixedModel.step`` as a list of vector operations, plus its ROM encoding.

Python, no hardware (only the engines' operand codes are imported): ``build_program(cfg)`` turns a
``ModelConfig`` into the list of ``Op`` that the sequencer (hw/sequencer.py) runs once per position,
in exactly the order of ``FixedModel.step``.
Operands are vector-register-file (VRF) slots; ``allocate`` maps the symbolic values onto as few
physical slots as their live ranges allow. ``encode`` packs every op into one ROM word (field
widths in ``fields(cfg)``; the sequencer decodes with the same table) and ``write_hex`` writes the
``$readmemh`` file. ``emulate`` runs a program with the fixed-point model's functions (the same
calls ``FixedModel`` makes; hw/program_emu.py), so a program bug shows up in Python before any RTL runs.

Ops (engine in brackets; every op runs its feed and its collect concurrently, then the next op starts;
only a keep MV, and a PLD, start while matvec results are still being written):
  EMB   dst                       embedding row of the position's token          [embedding unit]
  MV    rec src -> dst            mac_input(src) then the INT4 matvec of record rec (+9·expert)  [MAC array]
        res=1: src, p -> dst: the results are written as X.fit(p + y) (a sublayer's residual add)
        head=1: LOGIT format, results to the logits writer (memory), argmax tracked
        keep=1: the MAC array still holds this src (the previous MV's, same fan-in): no activation
        feed, and the matvec is issued while the previous one's results still drain (``mark_keep``)
  PLD   rec -> PRF a|b            copy a small int16 tensor from the weight store to a parameter buffer, in
                                  the background (``hoist_plds`` places it early; PRF readers wait for it)
  RMS   src -> dst                RMSNorm with w = PRF a                          [norm unit]
  MIX   srcs -> dst               residual mix, w = PRF a, proj = PRF b           [residual mixer]
  EW    src0, src1 -> dst         ADD or SWIGLU                                   [elementwise unit]
  KDA   src (segment sel)         KDA engine input; last=1 collects the output into dst
  ROUTE src                       router with bias = PRF a; experts/weights into registers  [router]
                                  (the op ends with the experts; COMB waits for the weights)
  COMB  shared, outs, res -> dst  MoE combine with the router weights, plus the residual res  [combine unit]
  MLA   src words w0..w0+nw       MLA engine input beats; last=1 collects ctx into dst  [MLA engine]
  END                             argmax word, next position (or finish)
"""
from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from pathlib import Path

from nano_k3.config import ModelConfig
from nano_k3.fixed import mix_plan
from nano_k3.tensors import record_names

from .kda_params import Sel as KdaSel      # the engines' own operand codes, used in the program words
from .params import log2
from .roms import RomImage
from .vector_unit import EwOp as EwKind

LANES = 16                    # X elements per VRF word (= MLA engine lanes = MAC out_lanes)


class Opc(enum.IntEnum):
    END = 0
    EMB = 1
    MV = 2
    PLD = 3
    RMS = 4
    MIX = 5
    EW = 6
    KDA = 7
    ROUTE = 8
    COMB = 9
    MLA = 10


INTERLEAVED = (Opc.EW, Opc.COMB, Opc.MIX)    # ops fed element by element with every source side by side


class PaMode(enum.IntEnum):      # index of the PRF a element for element i
    LIN = 0          # i (int16)
    HEADMOD = 1      # i mod dh (int16): KDA onorm.w shared by the heads
    TAPS = 2         # conv_k int16 taps of channel i


class PbMode(enum.IntEnum):      # index of the PRF b element for element i
    LIN = 0          # i
    HEAD = 1         # i // dh: KDA A of the head


@dataclass(frozen=True)
class Op:
    opc: Opc
    srcs: tuple = ()          # value names (slots after ``allocate``)
    dst: object = None
    n: int = 0                # elements fed (per source)
    rec: int = 0              # descriptor record (.q for MV, the tensor for PLD)
    fan_in: int = 0
    fan_out: int = 0
    expert: int = 0           # MV: 0 = rec as is, j + 1 = rec + 9 * (router choice j)
    head: int = 0             # MV: LM head (LOGIT, to memory)
    keep: int = 0             # MV: the MAC array's activations are this op's (see ``mark_keep``)
    res: int = 0              # MV: results are written as X.fit(srcs[1] + y), srcs[1] the residual
    prf: int = 0              # PLD: 0 = a, 1 = b
    nbeats: int = 0           # PLD: beats to copy
    sel: int = 0              # KDA: segment
    layer: int = 0            # KDA: layer region of the engine's SRAMs
    last: int = 0             # KDA / MLA: final segment (collect the output)
    n_out: int = 0            # KDA / MLA: output elements to collect
    ewop: int = 0
    pa: int = 0
    pb: int = 0
    w0: int = 0               # MLA: first word
    nw: int = 0               # MLA: words
    name: str = ""            # tensor (MV / PLD / EMB) for the emulator and listings

    def listing(self) -> str:
        s = f"{self.opc.name:5s} {','.join(map(str, self.srcs)):22s} -> {self.dst!s:8s}"
        return s + (f" {self.name}" if self.name else "") + (f" n={self.n}" if self.n else "")


def _check(cfg: ModelConfig) -> None:
    """What this generator (and the sequencer) supports, said once with the bad value."""
    if cfg.d_model % (2 * LANES) or cfg.d_model > 64:
        raise ValueError(f"d_model must be a multiple of {2 * LANES} and <= 64 (one embedding scale group "
                         f"at both group sizes), got {cfg.d_model}")
    if cfg.n_mla_layers > 1:
        raise ValueError(f"the MLA engine keeps one layer's cache; got {cfg.n_mla_layers} MLA layers")
    for h, d in ((cfg.mla_heads, cfg.mla_dk), (cfg.mla_heads, cfg.mla_dr), (cfg.mla_heads, cfg.mla_dv)):
        if h > 1 and d % LANES:
            raise ValueError(f"MLA per-head widths must be multiples of {LANES} with several heads, got {d}")
    if cfg.n_shared != 1:
        raise ValueError(f"the combine unit expects one shared expert, got n_shared={cfg.n_shared}")
    if cfg.top_k + 2 > MAX_SRCS:
        raise ValueError(f"COMB reads the shared expert, top_k chosen ones and the residual: top_k must be at "
                         f"most {MAX_SRCS - 2}, got {cfg.top_k}")


def build_program(cfg: ModelConfig) -> list[Op]:
    """One position of FixedModel.step as ops over symbolic values (see the module docstring)."""
    _check(cfg)
    recs = {n: k for k, n in enumerate(record_names(cfg))}
    ops: list[Op] = []
    tmp = iter(range(1 << 30))

    def new(tag):
        return f"{tag}#{next(tmp)}"

    def pld(name, prf):
        nbytes = _param_bytes(cfg, name)
        ops.append(Op(Opc.PLD, rec=recs[name], prf=prf, nbeats=-(-nbytes // 16), name=name))

    def mv(name, src, fan_in, fan_out, expert=0, head=0, rec_name=None):
        dst = None if head else new(name.split(".")[-1])
        ops.append(Op(Opc.MV, (src,), dst, n=fan_in, rec=recs[(rec_name or name) + ".q"], fan_in=fan_in,
                      fan_out=fan_out, expert=expert, head=head, name=name))
        return dst

    def rms(src, wname, n):
        pld(wname, 0)
        dst = new("rn")
        ops.append(Op(Opc.RMS, (src,), dst, n=n, name=wname))
        return dst

    def mix(cands, name):
        pld(name + ".norm.w", 0)
        pld(name + ".proj", 1)
        dst = new("mix")
        ops.append(Op(Opc.MIX, tuple(cands), dst, n=d, name=name))
        return dst

    def ew(kind, a, b, n):
        dst = new(kind.name.lower())
        ops.append(Op(Opc.EW, (a, b), dst, n=n, ewop=int(kind)))
        return dst

    d = cfg.d_model
    x = new("emb")
    ops.append(Op(Opc.EMB, (), x, n=d, name="emb"))
    B: list = []
    kda_layer = 0
    for i, (boundary, pre_mix) in enumerate(mix_plan(cfg)):
        L = f"L{i}."
        p = x
        if boundary:
            B.append(x)
        if pre_mix:
            x = mix((B[:-1] if boundary else B) + [x], L + "res_attn")
        h = rms(x, L + "norm1.w", d)
        if cfg.layer_kinds[i] == "kda":
            a = _kda(cfg, ops, mv, pld, new, h, L + "kda", kda_layer)
            kda_layer += 1
        else:
            a = _mla(cfg, ops, mv, rms, new, h, L + "mla")
        if not boundary:        # the residual add p + a is the o projection's write-back
            o = ops[-1]
            assert o.opc == Opc.MV and o.dst == a, o
            ops[-1] = dataclasses.replace(o, srcs=(o.srcs[0], p), res=1)
        p = a
        x = mix(B + [p], L + "res_mlp")
        h2 = rms(x, L + "norm2.w", d)
        # every matvec of h2 back to back (the router's, the shared expert's, then the chosen ones'), the
        # SwiGLUs, then the down projections back to back (each starts while the one before drains)
        rl = mv(L + "moe.router", h2, d, cfg.n_experts)
        experts = [(L + "moe.shared", L + "moe.shared", 0)]
        experts += [(L + f"moe.top{j}", L + "moe.e0", j + 1) for j in range(cfg.top_k)]
        gu = []
        for k, (label, ename, ex) in enumerate(experts):
            if k == 1:
                pld(L + "moe.bias", 0)
                ops.append(Op(Opc.ROUTE, (rl,), None, n=cfg.n_experts, name=L + "moe.router"))
            gu.append([mv(f"{label}.{s}", h2, d, cfg.d_ff, expert=ex, rec_name=f"{ename}.{s}") for s in "gu"])
        hids = [ew(EwKind.SWIGLU, g, u, cfg.d_ff) for g, u in gu]
        outs = [mv(label + ".d", hid, cfg.d_ff, d, expert=ex, rec_name=ename + ".d")
                for (label, ename, ex), hid in zip(experts, hids)]
        x = new("moe")       # the residual add p + moe is the combine unit's last stage
        ops.append(Op(Opc.COMB, (*outs, p), x, n=d))
    x = mix(B + [x], "res_out")
    hn = rms(x, "final_norm.w", d)
    mv("head", hn, d, cfg.vocab, head=1)
    ops.append(Op(Opc.END))
    return hoist_plds(mark_keep(ops))


PRF_READERS = {Opc.RMS: (0,), Opc.MIX: (0, 1), Opc.ROUTE: (0,), Opc.KDA: (0, 1)}   # op -> PRFs it reads


def hoist_plds(ops: list[Op]) -> list[Op]:
    """Move every PLD up to just after the last op before it that reads or loads its parameter buffer,
    or to the position's start: the load then runs in the background (hw/sequencer.py) while the ops it
    passed run (at the start, while EMB waits for the position's embedding row, hw/emb_fetch.py)."""
    out: list[Op] = []
    for op in ops:
        k = len(out)
        if op.opc == Opc.PLD:
            while k > 0 and op.prf not in PRF_READERS.get(out[k - 1].opc, ()) and not (
                    out[k - 1].opc == Opc.PLD and out[k - 1].prf == op.prf):
                k -= 1
        out.insert(k, op)
    return out


def mark_keep(ops: list[Op]) -> list[Op]:
    """Set ``keep`` on every MV whose source value and fan-in are those of the MV before it (values
    are never rewritten, so the MAC array's activation registers still hold that vector)."""
    out, held = [], None
    for op in ops:
        if op.opc == Opc.MV:
            key = (op.srcs[0], op.fan_in)
            op = dataclasses.replace(op, keep=int(key == held))
            held = key
        out.append(op)
    return out


def _param_bytes(cfg: ModelConfig, name: str) -> int:
    from nano_k3.tensors import ParamSpec, tensor_specs
    for s in tensor_specs(cfg):
        if isinstance(s, ParamSpec) and s.name == name:
            return 2 * s.size
    raise KeyError(name)


def _kda(cfg, ops, mv, pld, new, h, n, layer):
    """The k, v, q, b matvecs of h, then the engine's segments interleaved with the remaining matvecs:
    each segment starts once its own matvec is written, while the array works on the next ones (f1, g1
    keep h in the array; f2, g2 take their inputs once it is free). Q goes after F: the engine's rows start
    after K, V, B, F and need q only in their second pass, so Q's transfers overlap the first."""
    d, P, dh = cfg.d_model, cfg.kda_width, cfg.kda_dh
    pre = {s: mv(f"{n}.{s}", h, d, P) for s in "kvq"}
    bl = mv(n + ".b", h, d, cfg.kda_heads)
    out = new("gated")

    def conv_segment(s, sel):
        pld(f"{n}.{s}conv", 0)
        ops.append(Op(Opc.KDA, (pre[s],), None, n=P, sel=int(sel), layer=layer, pa=int(PaMode.TAPS)))

    conv_segment("k", KdaSel.K)
    f1, g1 = mv(n + ".f1", h, d, dh), mv(n + ".g1", h, d, dh)
    conv_segment("v", KdaSel.V)
    f, z = mv(n + ".f2", f1, dh, P), mv(n + ".g2", g1, dh, P)
    ops.append(Op(Opc.KDA, (bl,), None, n=cfg.kda_heads, sel=int(KdaSel.B), layer=layer))
    pld(n + ".dtb", 0)
    pld(n + ".A", 1)
    ops.append(Op(Opc.KDA, (f,), None, n=P, sel=int(KdaSel.F), layer=layer, pb=int(PbMode.HEAD)))
    conv_segment("q", KdaSel.Q)
    pld(n + ".onorm.w", 0)
    ops.append(Op(Opc.KDA, (z,), out, n=P, sel=int(KdaSel.Z), layer=layer, pa=int(PaMode.HEADMOD), last=1,
                  n_out=P))
    return mv(n + ".o", out, P, d)


def _mla(cfg, ops, mv, rms, new, h, n):
    d, H, dc = cfg.d_model, cfg.mla_heads, cfg.mla_dc
    dk, dr, dv = cfg.mla_dk, cfg.mla_dr, cfg.mla_dv
    c = mv(n + ".wc", h, d, dc)                # the matvecs of h back to back, then those of the latent
    qc = mv(n + ".wq_c", h, d, H * dk)
    qr = mv(n + ".wq_r", h, d, H * dr)
    kr = mv(n + ".wk_r", h, d, dr)
    lat = rms(c, n + ".knorm.w", dc)
    kc = mv(n + ".wk_c", lat, dc, H * dk)
    v = mv(n + ".wv", lat, dc, H * dv)
    w = lambda e: -(-e // LANES)    # noqa: E731  words of a segment
    segs = []
    for hh in range(H):
        segs += [(qc, hh * dk // LANES, w(dk)), (qr, hh * dr // LANES, w(dr))]
    segs += [(kc, hh * dk // LANES, w(dk)) for hh in range(H)]
    segs += [(kr, 0, w(dr))]
    segs += [(v, hh * dv // LANES, w(dv)) for hh in range(H)]
    ctx = new("ctx")
    for k, (src, w0, nw) in enumerate(segs):
        last = k == len(segs) - 1
        ops.append(Op(Opc.MLA, (src,), ctx if last else None, w0=w0, nw=nw, last=int(last),
                      n_out=H * w(dv) * LANES if last else 0))
    return mv(n + ".o", ctx, H * dv, d)


# --- slot allocation -----------------------------------------------------------------------------
def allocate(ops: list[Op]) -> tuple[list[Op], int]:
    """Map symbolic values to physical VRF slots (greedy over live ranges); returns (ops, n_slots).

    A destination never shares a slot with a value that dies in the same op (sources are read
    while results are written)."""
    last_use: dict = {}
    for k, op in enumerate(ops):
        for s in op.srcs:
            last_use[s] = k
    free: list[int] = []
    where: dict = {}
    n_slots = 0
    out = []
    for k, op in enumerate(ops):
        dst = op.dst
        if dst is not None and dst not in where:
            if free:
                where[dst] = free.pop(0)
            else:
                where[dst] = n_slots
                n_slots += 1
        out.append(dataclasses.replace(op, srcs=tuple(where[s] for s in op.srcs),
                                       dst=where[dst] if dst is not None else 0))
        for s in set(op.srcs):
            if last_use[s] == k and s != dst:
                free.append(where[s])
        if dst is not None and dst not in last_use:
            raise ValueError(f"op {k} ({op.listing()}) writes a value nobody reads")
        free.sort()
    return out, n_slots


# --- ROM encoding ----------------------------------------------------------------------------------
MAX_SRCS = 4


def fields(cfg: ModelConfig, n_slots: int) -> dict[str, int]:
    """Field widths of one ROM word, in bit order (the sequencer builds its StructLayout from this)."""
    sb = max(1, (n_slots - 1).bit_length())
    nrec = len(record_names(cfg))
    big = max(cfg.vocab, cfg.mla_dc, cfg.kda_width, cfg.d_model, 2 * cfg.mla_heads * cfg.mla_dv)
    return {"opc": 4, **{f"s{k}": sb for k in range(MAX_SRCS)}, "ns": 3, "dst": sb,
            "n": big.bit_length(), "rec": max(1, (nrec - 1).bit_length()), "fan_in": big.bit_length(),
            "fan_out_log2": 4, "expert": 3, "head": 1, "keep": 1, "res": 1, "prf": 1, "nbeats": 8, "sel": 3, "layer": 2, "last": 1,
            "n_out": big.bit_length(), "ewop": 2, "pa": 2, "pb": 1, "w0": 4, "nw": 4}


def word_bits(cfg: ModelConfig, n_slots: int) -> int:
    return -(-sum(fields(cfg, n_slots).values()) // 8) * 8


def encode(op: Op, cfg: ModelConfig, n_slots: int) -> int:
    vals = {"opc": int(op.opc), "ns": len(op.srcs), "dst": op.dst or 0, "n": op.n, "rec": op.rec,
            "fan_in": op.fan_in, "fan_out_log2": log2(op.fan_out) if op.fan_out else 0, "expert": op.expert,
            "head": op.head, "keep": op.keep, "res": op.res, "prf": op.prf, "nbeats": op.nbeats, "sel": op.sel, "layer": op.layer,
            "last": op.last, "n_out": op.n_out, "ewop": op.ewop, "pa": op.pa, "pb": op.pb, "w0": op.w0,
            "nw": op.nw}
    if len(op.srcs) > MAX_SRCS:
        raise ValueError(f"op {op.listing()} has {len(op.srcs)} sources; at most {MAX_SRCS}")
    for k in range(MAX_SRCS):
        vals[f"s{k}"] = op.srcs[k] if k < len(op.srcs) else 0
    if op.fan_out and op.fan_out & (op.fan_out - 1):
        raise ValueError(f"fan_out must be a power of two, got {op.fan_out} in {op.listing()}")
    word, off = 0, 0
    for name, w in fields(cfg, n_slots).items():
        v = vals[name]
        if not 0 <= v < 1 << w:
            raise ValueError(f"field {name}={v} does not fit {w} bits in {op.listing()}")
        word |= v << off
        off += w
    return word


@dataclass(frozen=True)
class Program:
    cfg: ModelConfig
    ops: tuple
    n_slots: int

    @property
    def word_bits(self) -> int:
        return word_bits(self.cfg, self.n_slots)

    @property
    def depth(self) -> int:
        return max(2, 1 << (len(self.ops) - 1).bit_length())

    def words(self) -> list[int]:
        return [encode(op, self.cfg, self.n_slots) for op in self.ops]

    def rom_words(self) -> list[int]:
        """The ROM image: every op's word, then zeros up to ``depth``."""
        return self.words() + [0] * (self.depth - len(self.ops))

    def rom_image(self) -> RomImage:
        """The program ROM as ``hw.roms.RomImage`` (instance ``program_rom``, checked in the load phase)."""
        return RomImage("program_rom", f"{ROM_NAME}.hex", self.depth, self.word_bits, tuple(self.rom_words()))

    def write_hex(self, path: Path | str) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        digits = self.word_bits // 4
        path.write_text("".join(f"{w:0{digits}x}\n" for w in self.rom_words()))
        return path

    def listing(self) -> str:
        return "\n".join(f"{k:3d} {op.listing()}" for k, op in enumerate(self.ops))


def program_for(cfg: ModelConfig) -> Program:
    ops, n = allocate(build_program(cfg))
    return Program(cfg, tuple(ops), n)


ROM_NAME = "chip_program"
