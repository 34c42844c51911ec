"""The tensor catalogue: every weight of the model, its shape and number format, in canonical order.

SPEC_NANO_KPU.md §4.2 fixes the order; §4.3/§4.4 fix the formats. Matmul weights are logical
tensors ``MatSpec`` that become three image records (``.q``, ``.s``, ``.z``); small int16 parameters
are ``ParamSpec`` and become one record each.
"""
from __future__ import annotations

from dataclasses import dataclass

from .config import ModelConfig

PARAM_BITS = 16           # every small parameter is an int16 / uint16 in the image (SPEC §4.4)
# Formats of the small int16 parameters (SPEC §4.4): name -> (fractional bits, signed).
PARAM_FORMATS = {
    "norm": (13, True),   # Q2.13 gain offset: gain = 1 + v / 8192
    "q4_11": (11, True),  # Q4.11: v / 2048
    "uq8_8": (8, False),  # unsigned Q8.8: v / 256
}


@dataclass(frozen=True)
class MatSpec:
    """A packed int4 weight of shape fan_in x fan_out (y = x . W); ``emb`` is token-major."""

    name: str
    fan_in: int
    fan_out: int
    emb: bool = False


@dataclass(frozen=True)
class ParamSpec:
    """A small int16 parameter; ``shape`` is the row-major array shape."""

    name: str
    shape: tuple[int, ...]
    fmt: str

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


def _layer_specs(cfg: ModelConfig, i: int) -> list[MatSpec | ParamSpec]:
    d, p = cfg.d_model, cfg.kda_width
    pre = f"L{i}."
    out: list[MatSpec | ParamSpec] = [
        ParamSpec(pre + "res_attn.norm.w", (d,), "norm"),
        ParamSpec(pre + "res_attn.proj", (d,), "q4_11"),
        ParamSpec(pre + "norm1.w", (d,), "norm"),
    ]
    if cfg.layer_kinds[i] == "kda":
        h, dh = cfg.kda_heads, cfg.kda_dh
        out += [
            MatSpec(pre + "kda.q", d, p), MatSpec(pre + "kda.k", d, p), MatSpec(pre + "kda.v", d, p),
            MatSpec(pre + "kda.b", d, h),
            MatSpec(pre + "kda.f1", d, dh), MatSpec(pre + "kda.f2", dh, p),
            MatSpec(pre + "kda.g1", d, dh), MatSpec(pre + "kda.g2", dh, p),
            MatSpec(pre + "kda.o", p, d),
            ParamSpec(pre + "kda.qconv", (p, cfg.conv_k), "q4_11"),
            ParamSpec(pre + "kda.kconv", (p, cfg.conv_k), "q4_11"),
            ParamSpec(pre + "kda.vconv", (p, cfg.conv_k), "q4_11"),
            ParamSpec(pre + "kda.A", (h,), "uq8_8"),
            ParamSpec(pre + "kda.dtb", (p,), "q4_11"),
            ParamSpec(pre + "kda.onorm.w", (dh,), "norm"),
        ]
    else:
        h = cfg.mla_heads
        out += [
            MatSpec(pre + "mla.wc", d, cfg.mla_dc),
            MatSpec(pre + "mla.wq_c", d, h * cfg.mla_dk),
            MatSpec(pre + "mla.wq_r", d, h * cfg.mla_dr),
            MatSpec(pre + "mla.wk_c", cfg.mla_dc, h * cfg.mla_dk),
            MatSpec(pre + "mla.wk_r", d, cfg.mla_dr),
            MatSpec(pre + "mla.wv", cfg.mla_dc, h * cfg.mla_dv),
            MatSpec(pre + "mla.o", h * cfg.mla_dv, d),
            ParamSpec(pre + "mla.knorm.w", (cfg.mla_dc,), "norm"),
        ]
    out += [
        ParamSpec(pre + "res_mlp.norm.w", (d,), "norm"),
        ParamSpec(pre + "res_mlp.proj", (d,), "q4_11"),
        ParamSpec(pre + "norm2.w", (d,), "norm"),
        MatSpec(pre + "moe.router", d, cfg.n_experts),
        ParamSpec(pre + "moe.bias", (cfg.n_experts,), "q4_11"),
    ]
    experts = (["shared"] if cfg.n_shared else []) + [f"e{j}" for j in range(cfg.n_experts)]
    for e in experts:
        out += [MatSpec(f"{pre}moe.{e}.g", d, cfg.d_ff), MatSpec(f"{pre}moe.{e}.u", d, cfg.d_ff),
                MatSpec(f"{pre}moe.{e}.d", cfg.d_ff, d)]
    return out


def tensor_specs(cfg: ModelConfig) -> list[MatSpec | ParamSpec]:
    """All logical tensors in canonical image order (SPEC §4.2)."""
    d = cfg.d_model
    specs: list[MatSpec | ParamSpec] = [MatSpec("emb", d, cfg.vocab, emb=True)]
    for i in range(cfg.n_layers):
        specs += _layer_specs(cfg, i)
    specs += [
        ParamSpec("res_out.norm.w", (d,), "norm"),
        ParamSpec("res_out.proj", (d,), "q4_11"),
        ParamSpec("final_norm.w", (d,), "norm"),
        MatSpec("head", d, cfg.vocab),
    ]
    return specs


def record_names(cfg: ModelConfig) -> list[str]:
    """Descriptor-record names in order: a triple per MatSpec, one per ParamSpec."""
    names: list[str] = []
    for s in tensor_specs(cfg):
        names += [s.name + ".q", s.name + ".s", s.name + ".z"] if isinstance(s, MatSpec) else [s.name]
    return names
