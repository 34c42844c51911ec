"""Generate mode on the chip (header word 32, issue 19): every position after the prompt reads the previous
position's argmax, which the chip writes into the token array first; checked bit for bit against the
fixed-point model's greedy decode (``nano_k3.greedy``), token array included, under the SPEC §3 profiles."""
from __future__ import annotations

from verification.chip_run import chip_sources, run_chip_sim
from verification.chip_tb import RunSpec

PROMPT = (5, 17, 3)


def _failed(report: dict) -> dict[str, str]:
    return {c["name"]: c["message"] for c in report["checks"] if not c["passed"]}


def test_tiny_chip_generates(tmp_path):
    from hw.params import preset
    from rtl_gen import emit, read_filelist
    rtl = emit("chip", tmp_path / "rtl", preset("tiny"))
    runs = [RunSpec(seq_len=16, profile=p, config="tiny", seed=11, prompt=PROMPT) for p in ("long", "short")]
    runs.append(RunSpec(seq_len=16, profile="short", config="tiny", seed=11, prompt=PROMPT[:1] * 16))
    res = run_chip_sim("chip-tiny-generate", chip_sources(read_filelist(rtl.filelist)), rtl.top, runs,
                       rtl_dir=rtl.verilog.parent)
    for name, r in res.reports.items():
        print(f"{name}: {r['cycles']} cycles; " + "; ".join(c["message"] for c in r["checks"]
                                                            if c["name"] in ("bit_exact", "generated_tokens")))
    assert res.passed, {n: _failed(r) for n, r in res.reports.items()} or f"no reports; see {res.log}"
    checks = {c["name"] for c in res.reports["tiny-g64-s16-short-gen3"]["checks"]}
    assert {"generated_tokens", "decoder_order", "bit_exact"} <= checks
