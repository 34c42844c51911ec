"""The chip checks its ROMs before it trusts them: a missing, zeroed or corrupted ROM file ends the run with
DONE and ``STATUS_BAD_ROM | k`` (``0xBAD00080 + k``), never 0x600DD00D.

``hw.rom_check.RomCheck`` reads every word of every msh_rom during the load phase and compares each ROM's
checksum with the generator's (``config.json`` ``derived.roms`` lists them in check order); ROM k failing
first ends the run with status ``hw.chip_load.STATUS_BAD_ROM | k`` and no position runs. The ROM files
are read when the simulation starts, so one Verilator build of the tiny chip serves every case: each runs
in its own folder whose ``rtl/roms/`` holds the case's files (SPEC §5 path):

* ``valid``: the emitted files; status 0x600DD00D written last, logits and argmax bit-exact (FixedModel);
* ``missing``: no ROM file at all (every $readmemh fails; the original bug);
* ``zeroed``: one LUT file all zeros; ``flipped``: one bit of one word of one file (both chosen by ``SEED``).

A faulty case must end with DONE, within ``MAX_CYCLES``, no address error, and exactly one write: the
status word of the first ROM instance reading the changed file, before DONE. ``chip_rom_case`` is the
cocotb test (the case from $NANO_K3_ROM_CASE); ``test_chip_checks_its_roms`` the pytest runner.
"""
from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import cocotb

from nano_k3.image import STATUS_DONE
from verification.chip_tb import (Check, ChipTB, RunSpec, check_addr_errors, check_argmax_words, check_bit_exact,
                                  check_completion, check_done_order, check_status, read_output_arrays, region_of)
from verification.test_chip_errors import CFG, PROFILE, SEED, SEQ_LEN, base_image

CASE_ENV = "NANO_K3_ROM_CASE"
MAX_CYCLES = 200_000
FAULTS = ("missing", "zeroed", "flipped")


def check_only_status(status_addr: int, expected: int, writes: list, done_cycle: int | None, lay) -> Check:
    """One write, the status word ``expected`` to ``status_addr``, accepted before DONE."""
    if len(writes) != 1 or writes[0][1] != status_addr:
        first = f"; first at cycle {writes[0][0]} to {writes[0][1]:#x} ({region_of(lay, writes[0][1])})" if writes else ""
        return Check("writes", False, f"{len(writes)} write(s), expected only the status word{first}")
    c, _, data, strb = writes[0]
    if strb & 0xF != 0xF or data & 0xFFFFFFFF != expected:
        return Check("writes", False, f"status word {data & 0xFFFFFFFF:#010x} (wstrb {strb:#06x}), expected {expected:#010x}")
    if done_cycle is None or c >= done_cycle:
        return Check("writes", False, f"status write at cycle {c} is not before DONE (cycle {done_cycle})")
    return Check("writes", True, f"only the status word {expected:#010x}, cycle {c}, before DONE")


@cocotb.test()
async def chip_rom_case(dut):
    case = json.loads(os.environ[CASE_ENV])         # {"name", "expected" (status word), "out" (report folder)}
    image, ref_logits, ref_argmax = base_image()
    lay = image.layout
    run = RunSpec(seq_len=SEQ_LEN, profile=PROFILE, config=CFG.name, seed=SEED, max_cycles=MAX_CYCLES,
                  name=case["name"])
    dut._log.info(f"{case['name']}: tiny seed {SEED} seq_len {SEQ_LEN}, expect status {case['expected']:#010x}")
    tb = ChipTB(dut, run, image, progress_every=0)
    obs = await tb.run()
    mem = tb.final_memory()
    st = tb.mem.stats
    checks = [check_completion(obs, MAX_CYCLES), check_addr_errors(lay, st.addr_errors, obs.first_addr_error)]
    logits, argmax, status = read_output_arrays(mem, lay)
    if case["expected"] == STATUS_DONE:
        checks += [check_status(lay, status, obs.writes), check_done_order(lay, obs),
                   check_bit_exact(logits, ref_logits)[0], check_argmax_words(argmax, ref_argmax)]
    else:
        checks.append(check_only_status(lay.status_addr, case["expected"], obs.writes, obs.done_cycle, lay))
    for c in checks:
        dut._log.info(f"CHECK {case['name']}: {'PASS' if c.passed else 'FAIL'} {c.name}: {c.message}")
    failed = [f"{c.name}: {c.message}" for c in checks if not c.passed]
    Path(case["out"]).write_text(json.dumps({"name": case["name"], "expected": case["expected"], "status": status,
                                             "cycles": obs.cycles, "passed": not failed, "failures": failed}))
    assert not failed, f"{case['name']}: " + "; ".join(failed)


# ------------------------------------------------------------------------------------------------
# pytest runner


def fault_roms(fault: str, roms: Path, rng: random.Random, listed: list[str]) -> str | None:
    """Apply ``fault`` to the ROM folder ``roms`` (a copy); returns the file changed (None: all removed)."""
    if fault == "missing":
        shutil.rmtree(roms)
        return None
    name = rng.choice(sorted(listed))
    path = roms / name
    words = path.read_text().split()
    if fault == "zeroed":
        words = ["0" * len(w) for w in words]
    else:
        a = rng.randrange(len(words))
        bits = 4 * len(words[a])
        words[a] = f"{int(words[a], 16) ^ 1 << rng.randrange(bits):0{len(words[a])}x}"
    path.write_text("\n".join(words) + "\n")
    return name


def test_chip_checks_its_roms():
    """valid + each of FAULTS on one Verilator build of the tiny chip (each run in its own folder)."""
    from hw.params import preset as chip_preset
    from hw.roms import ROM_SUBDIR, RTL_DIR
    from hw.chip_load import STATUS_BAD_ROM
    from rtl_gen import emit, read_config, read_filelist
    from flow.toolchain import work_root
    from verification.runner import SIM_ROOT, link_rtl, run_cocotb
    from verification.test_chip import BUILD_ARGS, chip_sources
    name = "chip-roms-tiny"
    rtl = emit("chip", work_root() / "rtl" / name, chip_preset(CFG.name))
    roms = read_config(rtl.config)[0]["derived"]["roms"]          # check order: ROM k fails -> STATUS_BAD_ROM | k
    listed = sorted({Path(r["init_file"]).name for r in roms})
    rng = random.Random(SEED)
    print(f"seed {SEED}; {len(roms)} ROMs checked")
    results = {}
    for k, case in enumerate(("valid", *FAULTS)):
        work = SIM_ROOT / name / case
        shutil.rmtree(work, ignore_errors=True)
        if case == "valid":
            link_rtl(rtl.verilog.parent, work)
            expected, changed = STATUS_DONE, None
        else:
            shutil.copytree(rtl.verilog.parent / ROM_SUBDIR, work / RTL_DIR / ROM_SUBDIR)
            changed = fault_roms(case, work / RTL_DIR / ROM_SUBDIR, rng, listed)
            first = next(j for j, r in enumerate(roms) if changed is None or Path(r["init_file"]).name == changed)
            expected = STATUS_BAD_ROM | first
        out = work / "report.json"
        res = run_cocotb(name, chip_sources(read_filelist(rtl.filelist)), rtl.top, "verification.test_chip_roms",
                         build_args=BUILD_ARGS, test_dir=work, build=k == 0, check=False,
                         extra_env={CASE_ENV: json.dumps({"name": case, "expected": expected, "out": str(out)})})
        rep = json.loads(out.read_text()) if out.exists() else None
        results[case] = rep
        print(f"{case:8s} {changed or ('(emitted files)' if case == 'valid' else '(all removed)'):22s} "
              f"expected {expected:#010x} got {rep and rep['status']:#010x} cycles {rep and rep['cycles']} "
              f"{'PASS' if rep and rep['passed'] else 'FAIL'}" if rep else f"{case}: no report; see {res.log}")
        assert rep and rep["passed"] and res.passed, (rep and rep["failures"]) or f"see {res.log}"
        assert case == "valid" or rep["status"] != STATUS_DONE
    assert set(results) == {"valid", *FAULTS}
