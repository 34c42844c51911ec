"""The chip on malformed images: DONE, a status word other than 0x600DD00D, no stray memory traffic.

Contract (SPEC §2–§4): a malformed header (bad magic or version, dimensions beyond the build's maxima,
addresses outside memory) ends the run with DONE and a status word other than 0x600DD00D; the chip
never hangs on bad input. ``hw.sequencer.ChipCore`` answers a rejected header with
``0xBAD000xx`` (xx = 1 + index of the first failing check in ``HDR_CHECKS``) written to the status
address when that address is plausible (16-byte aligned, past the header, inside memory), then DONE.

``CASES`` is one valid tiny image (seed ``SEED``, ``SEQ_LEN`` positions) and copies of it with one
defect each. The cocotb test ``chip_header_error`` runs every case on ONE Verilator build of the tiny
chip under the SPEC §3 short-run timing (J = 24, ``mem_req_ready`` low 5 % of cycles) and checks:

* DONE, exactly once, within ``MAX_CYCLES``; zero address errors (drain after DONE included);
* rejected, status address plausible: exactly one write, the status word ``0xBAD000xx`` of the
  expected check, accepted before DONE (so no logits or argmax word was written); reads stop at
  the stage that failed (header beats only, or header + descriptor table);
* rejected, status address itself invalid: no write at all;
* the valid image: status 0x600DD00D written last, logits and argmax bit-exact with ``FixedModel``.

``test_chip_rejects_malformed_images`` is the pytest runner (build + all cases, ~3 min).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import cocotb
import numpy as np

from hw.chip_load import HDR_CHECKS, STATUS_BAD
from nano_k3.config import TINY
from nano_k3.image import DESC_BYTES, MAGIC, STATUS_DONE, Image, ImageLayout, build_image
from verification.chip_tb import (Check, ChipTB, RunSpec, check_addr_errors, check_argmax_words, check_bit_exact,
                                  check_completion, check_done_order, check_status, read_output_arrays, region_of)

SEED = 7
SEQ_LEN = 4
PROFILE = "short"
MAX_CYCLES = 200_000               # a rejected header needs a few hundred cycles, the valid run ~20k
HEADER_BEATS = 256 // 16
OUT_ENV = "NANO_K3_CHIP_ERRORS_OUT"

Edit = Callable[[ImageLayout], dict[int, int]]     # layout -> {byte address: new uint32 value}


def word(k: int) -> int:
    """Byte address of header word k."""
    return 4 * k


def desc_field(lay: ImageLayout, rec: int, f: int) -> int:
    """Byte address of field f (0 hash, 1 address, 2 length, 3 aux) of descriptor record ``rec``."""
    return lay.desc_addr + DESC_BYTES * rec + 4 * f


@dataclass(frozen=True)
class Case:
    name: str
    edit: Edit
    check: str | None = None        # the HDR_CHECKS entry that must fail first; None: a valid image
    status_plausible: bool = True   # False: the defect is the status address itself, nothing may be written

    @property
    def expected_status(self) -> int:
        return STATUS_DONE if self.check is None else STATUS_BAD | (HDR_CHECKS.index(self.check) + 1)


CFG = TINY                          # the one build this file tests
CASES: tuple[Case, ...] = (
    Case("valid", lambda lay: {}),
    Case("bad-magic", lambda lay: {word(0): MAGIC ^ 0x01000000}, "magic"),
    Case("bad-version", lambda lay: {word(1): 2}, "version"),
    Case("d_model-x2", lambda lay: {word(3): 2 * CFG.d_model}, "dims"),
    Case("n_experts-x2", lambda lay: {word(12): 2 * CFG.n_experts}, "dims"),
    Case("vocab-x2", lambda lay: {word(17): 2 * CFG.vocab, word(30): 2 * lay.logits_stride}, "dims"),
    Case("max_seq-x2", lambda lay: {word(18): 2 * CFG.max_seq}, "dims"),
    Case("n_layers-0xffffffff", lambda lay: {word(2): 0xFFFFFFFF}, "dims"),
    Case("bitmap-all-mla", lambda lay: {word(21): (1 << CFG.n_layers) - 1}, "dims"),
    Case("bitmap-bit-beyond-layers", lambda lay: {word(21): CFG.layer_bitmap | 1 << 31}, "dims"),
    Case("desc-count-minus-1", lambda lay: {word(22): lay.n_records - 1}, "dims"),
    Case("desc-count-plus-1", lambda lay: {word(22): lay.n_records + 1}, "dims"),
    Case("group-96", lambda lay: {word(20): 96}, "group"),
    Case("seq_len-0", lambda lay: {word(19): 0, word(31): 0}, "seq_len"),
    Case("seq_len-max_seq+1", lambda lay: {word(19): CFG.max_seq + 1, word(31): CFG.max_seq + 1}, "seq_len"),
    Case("word31-ne-word19", lambda lay: {word(31): SEQ_LEN - 1}, "positions"),
    Case("logits-addr-misaligned", lambda lay: {word(25): lay.logits_addr + 8}, "align"),
    Case("desc-table-addr-misaligned", lambda lay: {word(23): lay.desc_addr + 4}, "align"),
    Case("status-addr-misaligned", lambda lay: {word(27): lay.status_addr + 4}, "align", status_plausible=False),
    Case("desc-table-beyond-memory", lambda lay: {word(23): lay.size + 0x1000}, "order"),
    Case("tokens-beyond-memory", lambda lay: {word(24): lay.size}, "order"),
    Case("logits-beyond-memory", lambda lay: {word(25): lay.size + 0x1000}, "order"),
    Case("status-beyond-memory", lambda lay: {word(27): lay.size + 0x1000}, "order", status_plausible=False),
    Case("status-at-memory-end", lambda lay: {word(27): lay.size}, "order", status_plausible=False),
    Case("status-in-header", lambda lay: {word(27): 0}, "order", status_plausible=False),
    Case("status-addr-0xfffffff0", lambda lay: {word(27): 0xFFFFFFF0}, "order", status_plausible=False),
    Case("scratch-beyond-memory", lambda lay: {word(28): lay.size + 0x1000}, "order"),
    Case("tensor-block-beyond-build", lambda lay: {word(24): lay.tokens_addr + 0x10000,
                                                   word(25): lay.logits_addr + 0x10000,
                                                   word(26): lay.argmax_addr + 0x10000,
                                                   word(27): lay.status_addr + 0x10000,
                                                   word(28): lay.scratch_addr + 0x10000}, "tensor_size"),
    Case("descriptor-beyond-memory", lambda lay: {desc_field(lay, 5, 1): lay.size + 0x1000}, "descriptors"),
    Case("descriptor-misaligned", lambda lay: {desc_field(lay, 7, 1): lay.descriptors[7].addr + 8}, "descriptors"),
    Case("descriptor-into-tokens", lambda lay: {desc_field(lay, lay.n_records - 1, 1): lay.tokens_addr},
         "descriptors"),
    Case("descriptor-backwards", lambda lay: {desc_field(lay, 9, 1): lay.descriptors[0].addr - 16}, "descriptors"),
    Case("first-descriptor-in-table", lambda lay: {desc_field(lay, 0, 1): lay.desc_addr}, "descriptors"),
)


def base_image() -> tuple[Image, np.ndarray, np.ndarray]:
    """The valid tiny image, and the fixed model's logits (T, vocab) and argmax (T,) for it."""
    from nano_k3.fixed import FixedModel
    from nano_k3.weights import generate, generate_tokens
    weights = generate(CFG, SEED)
    tokens = generate_tokens(CFG, SEED, SEQ_LEN)                 # (T,)
    logits, argmax = FixedModel(weights).forward_sequence(tokens)  # (T, vocab), (T,)
    return build_image(weights, tokens), logits, argmax


def corrupt(image: Image, edit: Edit) -> Image:
    buf = bytearray(image.data)
    for addr, value in edit(image.layout).items():
        buf[addr:addr + 4] = int(value).to_bytes(4, "little")
    return Image(image.layout, bytes(buf))


# ------------------------------------------------------------------------------------------------
# checks of a rejected image


def check_rejection_writes(case: Case, lay: ImageLayout, status_addr: int, writes: list, done_cycle: int | None,
                           final_mem: bytes) -> Check:
    """Only the status word, with the expected code, before DONE; or nothing when it has nowhere to go."""
    if not case.status_plausible:
        if writes:
            c, a, _, _ = writes[0]
            return Check("writes", False, f"{len(writes)} write(s) although the status address {status_addr:#x} "
                                          f"is invalid; first at cycle {c} to {a:#x} ({region_of(lay, a)})")
        return Check("writes", True, f"no write (status address {status_addr:#x} is invalid)")
    stray = [w for w in writes if w[1] != status_addr]
    if stray:
        c, a, _, _ = stray[0]
        return Check("writes", False, f"{len(stray)} write(s) besides the status word, first at cycle {c} to {a:#x} "
                                      f"({region_of(lay, a)})")
    if len(writes) != 1:
        return Check("writes", False, f"{len(writes)} status writes, expected exactly one")
    c, a, data, strb = writes[0]
    got = int.from_bytes(final_mem[status_addr:status_addr + 4], "little")
    if strb & 0xF != 0xF or data & 0xFFFFFFFF != case.expected_status or got != case.expected_status:
        return Check("writes", False, f"status word {data & 0xFFFFFFFF:#010x} (wstrb {strb:#06x}, memory reads "
                                      f"{got:#010x}), expected {case.expected_status:#010x} (check {case.check!r})")
    if done_cycle is None or c >= done_cycle:
        return Check("writes", False, f"status write at cycle {c} is not before DONE (cycle {done_cycle})")
    return Check("writes", True, f"only the status word {got:#010x} ({case.check}), cycle {c}, before DONE")


def check_reads_stop(case: Case, lay: ImageLayout, read_beats: int) -> Check:
    """A header rejected by a header check reads the header only; by the descriptor check, header + table."""
    limit = HEADER_BEATS + (lay.n_records if case.check == "descriptors" else 0)
    ok = read_beats <= limit
    return Check("reads", ok, f"{read_beats} read beats {'<=' if ok else '>'} {limit} (reading stops at the "
                              f"{'descriptor table' if case.check == 'descriptors' else 'header'})")


# ------------------------------------------------------------------------------------------------
# cocotb


@cocotb.test()
@cocotb.parametrize(case=[cocotb.Param(c, name=c.name) for c in CASES])
async def chip_header_error(dut, case: Case):
    image, ref_logits, ref_argmax = base_image()
    image = corrupt(image, case.edit)
    lay = image.layout
    status_addr = int.from_bytes(image.data[word(27):word(27) + 4], "little")
    run = RunSpec(seq_len=SEQ_LEN, profile=PROFILE, config=CFG.name, seed=SEED, max_cycles=MAX_CYCLES,
                  name=case.name)
    dut._log.info(f"{case.name}: tiny seed {SEED} seq_len {SEQ_LEN} {PROFILE} timing, expect status "
                  f"{case.expected_status:#010x}{'' if case.status_plausible else ' (not written)'}")
    tb = ChipTB(dut, run, image, progress_every=0)
    t0 = time.monotonic()
    obs = await tb.run()
    mem = tb.final_memory()
    st = tb.mem.stats                                     # including the drain after DONE
    checks = [check_completion(obs, MAX_CYCLES),
              check_addr_errors(lay, st.addr_errors, obs.first_addr_error)]
    if case.check is None:
        logits, argmax, status = read_output_arrays(mem, lay)
        checks += [check_status(lay, status, obs.writes), check_done_order(lay, obs),
                   check_bit_exact(logits, ref_logits)[0], check_argmax_words(argmax, ref_argmax)]
    else:
        checks += [check_rejection_writes(case, lay, status_addr, obs.writes, obs.done_cycle, mem),
                   check_reads_stop(case, lay, st.read_beats)]
    for c in checks:
        dut._log.info(f"CHECK {case.name}: {'PASS' if c.passed else 'FAIL'} {c.name}: {c.message}")
    failed = [f"{c.name}: {c.message}" for c in checks if not c.passed]
    in_mem = status_addr % 16 == 0 and status_addr + 4 <= len(mem)
    status = int.from_bytes(mem[status_addr:status_addr + 4], "little") if in_mem else None
    if os.environ.get(OUT_ENV):
        out = Path(os.environ[OUT_ENV])
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{case.name}.json").write_text(json.dumps({
            "name": case.name, "check": case.check, "expected_status": case.expected_status, "status": status,
            "cycles": obs.cycles, "read_beats": st.read_beats, "write_beats": st.write_beats,
            "addr_errors": st.addr_errors, "passed": not failed, "failures": failed,
            "sim_seconds": round(time.monotonic() - t0, 2)}))
    assert not failed, f"{case.name}: " + "; ".join(failed)


# ------------------------------------------------------------------------------------------------
# pytest runner


def test_chip_rejects_malformed_images():
    """Every case of CASES on one Verilator build of the tiny chip."""
    import shutil
    from hw.params import preset as chip_preset
    from rtl_gen import emit, read_filelist
    from flow.toolchain import work_root
    from verification.runner import SIM_ROOT, link_rtl, run_cocotb
    from verification.test_chip import BUILD_ARGS, chip_sources
    name = "chip-errors-tiny"
    rtl = emit("chip", work_root() / "rtl" / name, chip_preset(CFG.name))
    link_rtl(rtl.verilog.parent, SIM_ROOT / name)
    out = SIM_ROOT / name / "reports"
    shutil.rmtree(out, ignore_errors=True)             # never read a stale report
    res = run_cocotb(name, chip_sources(read_filelist(rtl.filelist)), rtl.top, "verification.test_chip_errors",
                     build_args=BUILD_ARGS, extra_env={OUT_ENV: str(out)},
                     check=False)
    reports = {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*.json"))} if out.exists() else {}
    for c in CASES:
        r = reports.get(c.name)
        if r:
            got = "not written" if not c.status_plausible and not r["write_beats"] else \
                f"{r['status']:#010x}" if r["status"] is not None else "outside memory"
            print(f"{c.name:28s} {'PASS' if r['passed'] else 'FAIL'} status {got} (expected "
                  f"{c.expected_status:#010x}{'' if c.status_plausible else ', not written'}) cycles {r['cycles']} "
                  f"reads {r['read_beats']} writes {r['write_beats']} addr_errors {r['addr_errors']}")
    missing = [c.name for c in CASES if c.name not in reports]
    failed = {n: r["failures"] for n, r in reports.items() if not r["passed"]}
    assert not missing, f"no report for {missing}; see {res.log}"
    assert not failed and res.passed and res.n_tests == len(CASES), failed or f"see {res.log}"
