"""Unit tests of the chip top's own parts: the micro-program, and a per-op trace of the chip under Verilator.

* ``test_program_emulates_fixed_model``: ``hw.program_emu.emulate`` (the program run with the fixed-point
  model's functions) equals ``FixedModel.forward_sequence`` bit for bit (tiny, nano at group 64/128).
* ``test_program_rom_fields``: every op encodes into its ROM word and decodes back.
* ``chip_trace`` (cocotb) + ``run_chip_trace``: the whole chip under one SPEC timing profile while a
  monitor replays every VRF write and, after each op, compares the op's destination slot with the
  emulator's value; the first mismatch is reported as (position, op index, op, element, expected, got).
  ``test_chip_trace_tiny`` runs it on the tiny config (the debugging aid for bit-exactness).
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from hw.program import Opc, fields, program_for
from hw.program_emu import emulate
from nano_k3.config import preset
from nano_k3.fxp_ops import X

TRACE_ENV = "NANO_K3_CHIP_TRACE_RUN"


@pytest.mark.parametrize("name,group", [("tiny", 64), ("nano", 128), ("nano", 64)])
def test_program_emulates_fixed_model(name, group):
    from nano_k3.fixed import FixedModel
    from nano_k3.weights import generate, generate_tokens
    cfg = preset(name).with_group(group)
    prog = program_for(cfg)
    for seed in (1, 20260706):
        w = generate(cfg, seed)
        toks = generate_tokens(cfg, seed, 10)
        ref, _ = FixedModel(w).forward_sequence(toks)
        got = emulate(prog, w, toks)
        bad = np.argwhere(ref != got)
        assert not bad.size, f"{name} g{group} seed {seed}: first mismatch at {bad[0]}: {got[tuple(bad[0])]} vs {ref[tuple(bad[0])]}"


@pytest.mark.parametrize("name", ["tiny", "nano"])
def test_program_rom_fields(name):
    prog = program_for(preset(name))
    tab = fields(prog.cfg, prog.n_slots)
    for op, word in zip(prog.ops, prog.words()):
        off, dec = 0, {}
        for f, w in tab.items():
            dec[f] = (word >> off) & ((1 << w) - 1)
            off += w
        assert dec["opc"] == int(op.opc) and dec["n"] == op.n and dec["rec"] == op.rec, op.listing()
        assert dec["dst"] == (op.dst or 0) and [dec[f"s{k}"] for k in range(len(op.srcs))] == list(op.srcs)
    assert prog.ops[-1].opc == Opc.END and prog.word_bits % 8 == 0


# ------------------------------------------------------------------------------------------------------
# cocotb: per-op trace of the whole chip

try:
    import cocotb
    from cocotb.triggers import ReadOnly, RisingEdge
except ImportError:      # pragma: no cover - cocotb is a project dependency
    cocotb = None


if cocotb is not None:
    @cocotb.test()
    async def chip_trace(dut):
        from verification.chip_tb import ChipTB, RunSpec
        from hw.params import preset as chip_preset
        from hw.sequencer import chip_build
        from nano_k3.image import build_image
        from nano_k3.weights import generate, generate_tokens
        run = RunSpec.from_dict(json.loads(os.environ[TRACE_ENV]))
        cfg = run.model_config()
        weights = generate(cfg, run.seed)
        tokens = generate_tokens(cfg, run.seed, run.seq_len)
        prog = program_for(cfg)
        trace: list = []
        emulate(prog, weights, tokens, trace)
        image = build_image(weights, tokens)
        tb = ChipTB(dut, run, image)
        core = dut.core
        SW = chip_build(chip_preset(run.config)).slot_words
        mism: list = []
        checked = [0]

        async def monitor():
            vrf: dict = {}
            pos, last_pc = 0, 0
            while True:
                await RisingEdge(dut.clk)
                await ReadOnly()
                if int(core.vrf_sram_we.value):
                    a = int(core.vrf_sram_waddr.value)
                    d = int(core.vrf_sram_wdata.value)
                    s = int(core.vrf_sram_wstrb.value)
                    word = vrf.setdefault(a, [None] * 16)
                    for j in range(16):
                        lo, hi = X.bits * j // 8, (X.bits * (j + 1) - 1) // 8     # element j's bytes
                        if (s >> lo) & ((1 << (hi - lo + 1)) - 1) == (1 << (hi - lo + 1)) - 1:
                            word[j] = X.element(d, j)
                # an op's result is checked when the op ends; a matvec's when the sequencer's result queue
                # pops it (its last result written; matvecs leave the queue in program order)
                rd = int(core.mvq_rd.value)
                if rd != last_rd[0]:
                    last_rd[0] = rd
                    check(vrf, *pending.pop(0))
                pc = int(core.pc.value)
                if pc != last_pc:
                    k = last_pc
                    if prog.ops[k].opc == Opc.MV and not prog.ops[k].head:
                        pending.append((pos, k))
                    elif pos < len(trace) and k in trace[pos] and not isinstance(trace[pos][k], tuple):
                        check(vrf, pos, k)
                    if prog.ops[k].opc == Opc.END:
                        pos += 1
                    last_pc = pc

        pending: list = []
        last_rd = [0]

        def check(vrf, pos, k):
            exp = trace[pos][k]
            op = prog.ops[k]
            got = [vrf.get(op.dst * SW + i // 16, [None] * 16)[i % 16] for i in range(exp.size)]
            checked[0] += 1
            bad = [i for i in range(exp.size) if got[i] != int(exp[i])]
            if bad and len(mism) < 8:
                i = bad[0]
                msg = (f"position {pos} op {k} ({op.listing()}): {len(bad)} of {exp.size} elements differ; "
                       f"first at element {i}: expected {int(exp[i])}, got {got[i]}")
                dut._log.error(msg)
                mism.append(msg)

        cocotb.start_soon(monitor())
        obs = await tb.run()
        dut._log.info(f"trace: {checked[0]} op results checked, {len(mism)} mismatches, cycles {obs.cycles}")
        assert obs.cycles is not None, "no DONE"
        assert not mism, mism[0]


def run_chip_trace(config: str = "tiny", seq_len: int = 3, profile: str = "short", group: int | None = None,
                   seed: int = 20260706):
    from hw.params import preset as chip_preset
    from rtl_gen import emit, read_filelist
    from verification.chip_tb import RunSpec
    from flow.toolchain import work_root
    from verification.runner import run_cocotb
    from verification.test_chip import BUILD_ARGS, chip_sources
    rtl = emit("chip", work_root() / "rtl" / f"chip-{config}", chip_preset(config))
    run = RunSpec(seq_len=seq_len, profile=profile, config=config, group=group, seed=seed)
    from verification.runner import SIM_ROOT, link_rtl
    name = f"chip-trace-{config}"
    link_rtl(rtl.verilog.parent, SIM_ROOT / name)
    return run_cocotb(name, chip_sources(read_filelist(rtl.filelist)), rtl.top, "verification.test_chip_units",
                      testcase="chip_trace", build_args=BUILD_ARGS, extra_env={TRACE_ENV: json.dumps(run.to_dict())},
                      check=False)


def test_chip_trace_tiny():
    res = run_chip_trace("tiny", 3, "short")
    assert res.passed, f"see {res.log}"
