"""Per-phase cycle accounting of a whole-chip run, read from the RTL by a cocotb monitor (no RTL changes).

``PhaseMonitor`` samples, every cycle between RUN and DONE (the SPEC §8 window, the same cycles
``Observation.cycles`` counts), the sequencer's micro-program counter ``core.pc``, its ``core.in_pos``
flag (a position is being processed) and the memory port, and charges the cycle to

* ``load.<region>`` before the first position: the region of the most recent read request the port
  accepted (``header``, ``descriptors``, ``tensors``, ``tokens``, ``embedding``; the chip reads the first
  three, then position 0's token, and reads embedding rows only within positions, so ``embedding`` stays 0);
* ``ops[pos][pc]`` while ``in_pos``: op ``pc`` of the micro-program (hw/program.py) at position ``pos``
  — every cycle of the op including its DISPATCH / DESC overhead (and FETCH for the first op);
* ``finish`` after the last position: status write, write drain, DONE response.

Each cycle is also classified on the request channel (``PORT_CLASSES``): a write or read request
transferred, a request blocked by ``mem_req_ready`` low, no request while reads are still outstanding
(waiting on read data), or no request and nothing outstanding (the port idles because the chip computes).

``chip_bench`` is the cocotb test the bench (verification/bench.py) runs: ``test_chip.chip_run`` (same
checks, same report) plus the monitor, whose result goes to ``<run>.phases.json`` next to the report.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from hw.mac_array import EMB_RECORDS
from verification.chip_tb import OUT_ENV, REFS_ENV, RUNS_ENV, ChipTB, RunSpec, check_run, prepare, runs_from_env, \
    save_report

PORT_CLASSES = ("write", "read", "blocked", "wait_read", "idle")
LOAD_REGIONS = ("header", "descriptors", "tensors", "tokens", "embedding")


def load_region(layout, addr: int) -> str:
    """Which load-phase region a read request address belongs to (SPEC §4 layout order): the header, the
    descriptors, the embedding table, the tensors after it, the token array."""
    table = layout.descriptors[0].addr
    first = layout.descriptors[len(EMB_RECORDS)].addr
    if addr < layout.desc_addr:
        return "header"
    if addr < table:
        return "descriptors"
    if addr < first:
        return "embedding"
    if addr < layout.tokens_addr:
        return "tensors"
    return "tokens"


class PhaseMonitor:
    """Cycle accounting of one run (see the module docstring); ``result()`` after DONE."""

    def __init__(self, dut, layout, n_ops: int):
        self.dut, self.layout, self.n_ops = dut, layout, n_ops
        self.load = {r: [0] * len(PORT_CLASSES) for r in LOAD_REGIONS}
        self.finish = [0] * len(PORT_CLASSES)
        self.ops: list[list[int]] = []                 # (positions, n_ops) cycles
        self.op_port: list[list[int]] = [[0] * len(PORT_CLASSES) for _ in range(n_ops)]   # summed over positions
        self.cycles = 0
        self.read_beats = self.write_beats = self.rsp_beats = 0
        self.done = False

    async def watch(self) -> None:
        from cocotb.triggers import ReadOnly, RisingEdge

        dut, core = self.dut, self.dut.core
        pc_s, in_pos_s = core.pc, core.in_pos
        v_s, r_s, w_s, a_s = dut.mem_req_valid, dut.mem_req_ready, dut.mem_req_write, dut.mem_req_addr
        rv_s, rr_s = dut.mem_rsp_valid, dut.mem_rsp_ready
        cv_s, cr_s, sv_s = dut.cmd_valid, dut.cmd_ready, dut.rsp_valid
        started, seen_pos, region, last_pc, pos = False, False, "header", 0, -1
        outstanding = 0
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            if not started:
                # RUN is sampled accepted in this cycle; counting starts with the next one (Observation.cycles)
                started = bool(int(cv_s.value) and int(cr_s.value))
                continue
            self.cycles += 1
            valid, ready = int(v_s.value), int(r_s.value)
            if valid and ready:
                if int(w_s.value):
                    cls = 0
                    self.write_beats += 1
                else:
                    cls = 1
                    self.read_beats += 1
                    outstanding += 1
                    if not seen_pos:
                        region = load_region(self.layout, int(a_s.value))
            elif valid:
                cls = 2
            else:
                cls = 3 if outstanding else 4
            if int(rv_s.value) and int(rr_s.value):
                outstanding -= 1
                self.rsp_beats += 1
            if int(in_pos_s.value):
                seen_pos = True
                pc = int(pc_s.value)
                if pos < 0 or pc < last_pc:
                    pos += 1
                    self.ops.append([0] * self.n_ops)
                last_pc = pc
                self.ops[pos][pc] += 1
                self.op_port[pc][cls] += 1
            elif seen_pos:
                self.finish[cls] += 1
            else:
                self.load[region][cls] += 1
            if int(sv_s.value):          # DONE sampled: the SPEC §8 window ends with this cycle
                self.done = True
                return

    def result(self) -> dict:
        return {"cycles": self.cycles, "port_classes": list(PORT_CLASSES),
                "load": {r: {"cycles": sum(v), "port": v} for r, v in self.load.items()},
                "ops": self.ops, "op_port": self.op_port,
                "finish": {"cycles": sum(self.finish), "port": self.finish},
                "read_beats": self.read_beats, "write_beats": self.write_beats, "rsp_beats": self.rsp_beats,
                "complete": self.done}


def phases_path(out_dir: Path, run_name: str) -> Path:
    return Path(out_dir) / f"{run_name}.phases.json"


try:
    import cocotb
except ImportError:      # pragma: no cover - cocotb is a project dependency
    cocotb = None


def _runs() -> list[RunSpec]:
    text = os.environ.get(RUNS_ENV)
    return runs_from_env(text) if text else [RunSpec(seq_len=4, profile="long")]


if cocotb is not None:
    @cocotb.test()
    @cocotb.parametrize(run=[cocotb.Param(r, name=r.name) for r in _runs()])
    async def chip_bench(dut, run: RunSpec):
        from hw.program import program_for

        image, ref = prepare(run, Path(os.environ[REFS_ENV]) if os.environ.get(REFS_ENV) else None)
        tb = ChipTB(dut, run, image)
        mon = PhaseMonitor(dut, image.layout, len(program_for(run.model_config()).ops))
        task = cocotb.start_soon(mon.watch())
        t0 = time.monotonic()
        obs = await tb.run()
        task.cancel()
        dut._log.info(f"{run.name}: simulated {obs.stats.get('cycles', 0)} cycles in {time.monotonic() - t0:.1f} s "
                      f"(monitor counted {mon.cycles})")
        mem = tb.final_memory()
        report = check_run(run, image.layout, mem, obs, ref)
        if os.environ.get(OUT_ENV):
            out = Path(os.environ[OUT_ENV])
            save_report(report, mem, image.layout, out)
            phases_path(out, run.name).write_text(json.dumps(mon.result()))
        for c in report.checks:
            dut._log.info(f"CHECK {run.name}: {'PASS' if c.passed else 'FAIL'} {c.name}: {c.message}")
        assert report.passed, f"{run.name}: " + "; ".join(report.failures())
        assert mon.done and mon.cycles == obs.cycles, \
            f"{run.name}: the monitor counted {mon.cycles} cycles, the testbench {obs.cycles}"
