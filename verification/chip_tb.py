"""Whole-chip testbench for ``msh_chip_top`` (SPEC_NANO_KPU.md §1–§4, §7, §8): the TB class and its checks.

A run (``RunSpec``) is one image (config, seed, group size, seq_len) under one SPEC §3 timing profile:

* ``long``    prompt index 0, base 24, J = 12, no ready drops (the throughput run);
* ``short``   prompt index 1, base 24, J = 24, ``mem_req_ready`` low 5 % of cycles (correctness stress);
* ``elastic`` the short run with base latency 48 (reported as cycles(elastic) / cycles(short)).
The random-initial-state re-run is the short run in a simulator started with
``+verilator+rand+reset+2``; its output region must be byte-identical to the normal short run's
(``compare_output_regions``). Jitter and ready-drop streams are seeded from FNV-1a of
(seed, config, prompt index) by ``MemoryModel``.

``ChipTB.run()`` follows SPEC §2 exactly: ``rst_n`` low for 16 cycles, then RUN (``cmd_data = 1``)
held until the chip takes it (the cycle count starts at that acceptance), ``rsp_ready`` always 1,
wait for DONE (0x0000D0DE) up to ``max_cycles`` (the SPEC's 300,000,000 is far beyond CI; the
default is 5,000,000 and a run that reaches it is reported as a timeout), then a short drain that
catches writes or responses after DONE. ``check_run`` then applies every gate and returns a
``RunReport``; each check is a pure function of arrays and logs, unit-tested in
tests/test_chip_tb.py without a simulator.

Cycle numbering: the memory model and the TB both count rising edges after reset release; an
event "at cycle k" is sampled in the read-only phase after edge k and transfers on edge k + 1.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hw.params import preset as chip_preset
from nano_k3.config import ModelConfig, preset
from nano_k3.image import STATUS_BYTES, STATUS_DONE, Image, ImageLayout, build_image, weight_bytes
from nano_k3.metrics import pick_correct, row_cosines
from nano_k3.mem_timing import ELASTIC_RUN, LONG_RUN, SHORT_RUN, Timing
from verification.mem_model import BEAT, MemoryModel

CMD_RUN = 0x00000001
RSP_DONE = 0x0000D0DE
RESET_CYCLES = 16                  # SPEC §2: rst_n low for 16 clock cycles
DEFAULT_MAX_CYCLES = 5_000_000     # CI limit; the SPEC's own limit is 300,000,000
DRAIN_CYCLES = 64                  # cycles watched after DONE for late writes / responses
COSINE_GATE = 0.98                 # SPEC §7, per run, minimum over rows
ARGMAX_GATE = 0.99                 # SPEC §7, pooled over the runs (also applied per run)
PUBLIC_SEED = 20260706             # SPEC §8: the public long run

RUNS_ENV = "NANO_K3_CHIP_RUNS"     # JSON list of RunSpec dicts, one cocotb test each
OUT_ENV = "NANO_K3_CHIP_OUT"       # folder for <run>.json reports and <run>.outputs.bin regions
REFS_ENV = "NANO_K3_CHIP_REFS"     # optional folder of precomputed <run>.ref.npz references
RAND_RESET_PLUSARG = "verilator+rand+reset+2"
RAND_RESET_SUFFIX = "-randreset"        # a random-initial-state run's report is named <run><suffix>


@dataclass(frozen=True)
class Profile:
    timing: Timing
    prompt_index: int


PROFILES: dict[str, Profile] = {
    "long": Profile(LONG_RUN, 0),
    "short": Profile(SHORT_RUN, 1),
    "elastic": Profile(ELASTIC_RUN, 1),
}


@dataclass(frozen=True)
class RunSpec:
    """One chip run: the image it reads and the memory timing it sees."""

    seq_len: int
    profile: str = "long"
    config: str = "nano"
    seed: int = PUBLIC_SEED
    group: int | None = None              # None: the preset's group size
    max_cycles: int = DEFAULT_MAX_CYCLES
    expected_in_scratch: bool = False     # protocol fixture only: preload the expected outputs into scratch
    prompt: tuple[int, ...] = ()          # generate mode (header word 32): these tokens, then the argmax fed back
    trained: bool = False                 # the trained image's weights (nano_k3/trained/nano.bin), not the seed's
    name: str = ""                        # readable id; derived when empty

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"profile must be one of {sorted(PROFILES)}, got {self.profile!r}")
        cfg = self.model_config()           # raises for an unknown preset or group size
        if not isinstance(self.seq_len, int) or not 1 <= self.seq_len <= cfg.max_seq:
            raise ValueError(f"seq_len must be an integer in 1..{cfg.max_seq} for {self.config}, got {self.seq_len!r}")
        if not isinstance(self.max_cycles, int) or self.max_cycles < 1:
            raise ValueError(f"max_cycles must be a positive integer, got {self.max_cycles!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")
        object.__setattr__(self, "prompt", tuple(int(t) for t in self.prompt))
        if len(self.prompt) > self.seq_len or any(not 0 <= t < cfg.vocab for t in self.prompt):
            raise ValueError(f"prompt must be at most seq_len={self.seq_len} ids below {cfg.vocab}, got {self.prompt}")
        if not self.name:
            tags = ("-trained" if self.trained else "") + (f"-gen{len(self.prompt)}" if self.prompt else "")
            object.__setattr__(self, "name", f"{self.config}-g{cfg.group_size}-s{self.seq_len}-{self.profile}{tags}")

    def model_config(self) -> ModelConfig:
        cfg = preset(self.config)
        return cfg if self.group is None else cfg.with_group(self.group)

    @property
    def timing(self) -> Timing:
        return PROFILES[self.profile].timing

    @property
    def clock_ns(self) -> float:
        """The clock period of the chip build of this preset (hw.params.ChipParams.clock_ns): the testbench's
        clock, and tokens/s are counted at it."""
        return chip_preset(self.config).clock_ns

    @property
    def clock_hz(self) -> float:
        return 1e9 / self.clock_ns

    @property
    def prompt_index(self) -> int:
        return PROFILES[self.profile].prompt_index

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "RunSpec":
        return cls(**d)


def runs_to_env(runs: list[RunSpec]) -> str:
    return json.dumps([r.to_dict() for r in runs])


def runs_from_env(text: str) -> list[RunSpec]:
    return [RunSpec.from_dict(d) for d in json.loads(text)]


# ------------------------------------------------------------------------------------------------
# Inputs and references


@dataclass(frozen=True)
class Reference:
    fixed_logits: np.ndarray    # (T, vocab) int32, the fixed-point model: the chip must match it bit for bit
    fixed_argmax: np.ndarray    # (T,) int64
    golden_logits: np.ndarray   # (T, vocab) float32, the float model of SPEC §6 (cosine, argmax agreement)
    fixed_tokens: np.ndarray    # (T,) int64: the token array after the run (generate mode writes it)


def run_inputs(run: RunSpec):
    """(weights, image tokens, prompt length) of a run: the seed's random weights and tokens, or the trained
    image's weights; in generate mode the token array holds the prompt and zeros."""
    from nano_k3.weights import generate, generate_tokens

    cfg = run.model_config()
    if run.trained:
        from nano_k3.corpus import TRAINED_DIR
        from nano_k3.image import read_image
        weights = read_image((TRAINED_DIR / "nano.bin").read_bytes()).weights
        if weights.cfg.group_size != cfg.group_size or weights.cfg.vocab != cfg.vocab:
            raise ValueError(f"{run.name}: the trained image is group {weights.cfg.group_size}, vocab "
                             f"{weights.cfg.vocab}; the run asks for {cfg.group_size}, {cfg.vocab}")
        weights = dataclasses.replace(weights, cfg=cfg)
    else:
        weights = generate(cfg, run.seed)
    if run.prompt:
        tokens = np.zeros(run.seq_len, np.uint32)
        tokens[:len(run.prompt)] = run.prompt
    else:
        tokens = generate_tokens(cfg, run.seed, run.seq_len)           # (T,)
    return weights, tokens, len(run.prompt)


def reference(run: RunSpec) -> Reference:
    """Fixed-point and float references of a run (imports torch: call it outside the simulator). In
    generate mode the float model is scored on the fixed-point model's tokens (same inputs, so the
    cosine compares arithmetic, not two diverged texts)."""
    from nano_k3.golden import GoldenModel
    from nano_k3.greedy import fixed_outputs
    from nano_k3.image import read_image

    weights, tokens, prompt_len = run_inputs(run)
    fixed = fixed_outputs(read_image(build_image(weights, tokens, prompt_len).data))
    golden = GoldenModel(weights).forward_sequence(fixed.tokens).numpy()   # (T, vocab)
    return Reference(fixed.logits, fixed.argmax, golden, fixed.tokens)


def reference_path(ref_dir: Path, run: RunSpec) -> Path:
    return Path(ref_dir) / f"{run.name}.ref.npz"


def save_reference(ref: Reference, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, fixed_logits=ref.fixed_logits, fixed_argmax=ref.fixed_argmax, golden_logits=ref.golden_logits,
             fixed_tokens=ref.fixed_tokens)


def load_reference(path: Path) -> Reference:
    with np.load(path) as z:
        return Reference(z["fixed_logits"], z["fixed_argmax"], z["golden_logits"], z["fixed_tokens"])


def prepare(run: RunSpec, ref_dir: Path | None = None) -> tuple[Image, Reference]:
    """The run's image (with the fixture's expected outputs in scratch if asked) and its references,
    read from ``ref_dir`` when the driver precomputed them there (keeps torch out of the simulator)."""
    cfg = run.model_config()
    image = build_image(*run_inputs(run))
    path = reference_path(ref_dir, run) if ref_dir is not None else None
    ref = load_reference(path) if path is not None and path.exists() else reference(run)
    if ref.fixed_logits.shape != (run.seq_len, cfg.vocab):
        raise ValueError(f"{run.name}: reference logits have shape {ref.fixed_logits.shape}, "
                         f"expected {(run.seq_len, cfg.vocab)}")
    if run.expected_in_scratch:
        image = preload_expected(image, ref.fixed_logits, ref.fixed_argmax)
    return image, ref


def output_span(layout: ImageLayout) -> tuple[int, int]:
    """[start, end) of logits rows + argmax words + status block: the bytes a run's outputs occupy."""
    return layout.logits_addr, layout.status_addr + STATUS_BYTES


def preload_expected(image: Image, logits: np.ndarray, argmax: np.ndarray) -> Image:
    """Test equipment only: the expected logits/argmax region (without status) copied to scratch,
    for verification/wrappers/protocol_fixture.v, which copies it to the output addresses."""
    lay = image.layout
    filled = image.with_outputs(logits, argmax, status=0).data
    region = filled[lay.logits_addr:lay.status_addr]
    buf = bytearray(image.data)
    buf[lay.scratch_addr:lay.scratch_addr + len(region)] = region
    return Image(lay, bytes(buf))


def read_output_arrays(data: bytes, layout: ImageLayout) -> tuple[np.ndarray, np.ndarray, int]:
    """(logits (T, vocab) int32, argmax (T,) uint32, status word) from a memory image (SPEC §4.5)."""
    n, vocab, stride = layout.seq_len, layout.cfg.vocab, layout.logits_stride
    rows = np.frombuffer(data, np.uint8, count=n * stride, offset=layout.logits_addr).reshape(n, stride)
    logits = rows[:, :4 * vocab].copy().view("<i4").astype(np.int32)                 # (T, vocab)
    argmax = np.frombuffer(data, "<u4", count=n, offset=layout.argmax_addr).astype(np.uint32)  # (T,)
    status = int(np.frombuffer(data, "<u4", count=1, offset=layout.status_addr)[0])
    return logits, argmax, status


def region_of(layout: ImageLayout, addr: int) -> str:
    """Human name of the image region holding byte ``addr`` (for messages)."""
    if layout.logits_addr <= addr < layout.argmax_addr:
        off = addr - layout.logits_addr
        p, b = divmod(off, layout.logits_stride)
        return f"logits row {p} (logit {b // 4})" if b < 4 * layout.cfg.vocab else f"logits row {p} padding"
    spans = [
        ("header", 0, layout.desc_addr),
        ("descriptor table", layout.desc_addr, layout.descriptors[0].addr if layout.descriptors else layout.tokens_addr),
        ("tensor block", layout.descriptors[0].addr if layout.descriptors else layout.tokens_addr, layout.tokens_addr),
        ("token ids", layout.tokens_addr, layout.logits_addr),
        ("argmax words", layout.argmax_addr, layout.status_addr),
        ("status block", layout.status_addr, layout.scratch_addr),
        ("scratch", layout.scratch_addr, layout.size),
    ]
    for name, lo, hi in spans:
        if lo <= addr < hi:
            return f"{name} (+{addr - lo:#x})" if name in ("argmax words", "scratch", "tensor block") else name
    return f"outside memory (size {layout.size:#x})"


# ------------------------------------------------------------------------------------------------
# What a run observed on the ports


@dataclass
class Observation:
    run_cycle: int | None = None          # cycle RUN was accepted
    done_cycle: int | None = None         # cycle DONE was accepted
    timeout: bool = False
    responses: list[tuple[int, int]] = field(default_factory=list)   # (cycle, word) of every response taken
    writes: list[tuple[int, int, int, int]] = field(default_factory=list)  # (cycle, addr, wdata, wstrb), all
    reads: list[tuple[int, int]] = field(default_factory=list)             # (cycle, addr) of every read accepted
    stats: dict = field(default_factory=dict)       # MemStats.as_dict() up to and including the DONE cycle
    first_addr_error: tuple[int, str, int] | None = None  # (cycle, "read"/"write", addr)
    rand_reset: bool = False

    @property
    def cycles(self) -> int | None:
        if self.run_cycle is None or self.done_cycle is None:
            return None
        return self.done_cycle - self.run_cycle


# ------------------------------------------------------------------------------------------------
# Checks: pure functions, each returns a Check (name, passed, message)


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    message: str

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Divergence:
    """First mismatching logit (row-major order) and how widespread the mismatch is."""

    position: int
    index: int
    chip: int
    ref: int
    rows_mismatching: int
    values_mismatching: int

    def describe(self, rows: int) -> str:
        return (f"first divergence at position {self.position}, logit {self.index}: chip {self.chip}, "
                f"fixed model {self.ref}; {self.rows_mismatching} of {rows} rows differ "
                f"({self.values_mismatching} values)")


def first_divergence(chip: np.ndarray, ref: np.ndarray) -> Divergence | None:
    """None when ``chip`` equals ``ref`` exactly, else where it first differs (row, then column)."""
    chip, ref = np.asarray(chip), np.asarray(ref)
    if chip.shape != ref.shape:
        raise ValueError(f"shape mismatch: chip {chip.shape}, reference {ref.shape}")
    bad = chip.astype(np.int64) != ref.astype(np.int64)           # (T, vocab)
    if not bad.any():
        return None
    p, i = (int(v) for v in np.argwhere(bad)[0])
    return Divergence(p, i, int(chip[p, i]), int(ref[p, i]), int(bad.any(axis=1).sum()), int(bad.sum()))


def check_completion(obs: Observation, max_cycles: int) -> Check:
    if obs.run_cycle is None:
        return Check("done", False, f"timeout: RUN was never accepted (cmd_ready low) within {max_cycles} cycles")
    others = [(c, w) for c, w in obs.responses if w != RSP_DONE]
    if others:
        c, w = others[0]
        return Check("done", False, f"unexpected response word {w:#010x} at cycle {c} "
                                    f"(only DONE = {RSP_DONE:#010x} is defined); {len(others)} such responses")
    if obs.timeout or obs.done_cycle is None:
        return Check("done", False, f"timeout: no DONE within {max_cycles} cycles after RUN (cycle {obs.run_cycle})")
    n_done = sum(1 for _, w in obs.responses if w == RSP_DONE)
    if n_done != 1:
        return Check("done", False, f"DONE was sent {n_done} times; exactly one response is allowed")
    return Check("done", True, f"DONE after {obs.cycles} cycles")


def check_status(layout: ImageLayout, status_word: int, writes: list[tuple[int, int, int, int]]) -> Check:
    """Status word reads 0x600DD00D and the last write of the run (including the drain) wrote it."""
    if status_word != STATUS_DONE:
        return Check("status", False, f"status word reads {status_word:#010x}, expected {STATUS_DONE:#010x}")
    if not writes:
        return Check("status", False, "no memory write at all, yet the status word is set")
    cycle, addr, wdata, wstrb = writes[-1]
    if addr != layout.status_addr or wstrb & 0xF != 0xF or wdata & 0xFFFFFFFF != STATUS_DONE:
        st = [w for w in writes if w[1] == layout.status_addr]
        when = f"the status write was accepted at cycle {st[-1][0]}" if st else "no write to the status block"
        return Check("status", False,
                     f"the last memory write (cycle {cycle}, address {addr:#x}, {region_of(layout, addr)}) is not "
                     f"the status word; {when} (SPEC §4.5: the status write must be the last write)")
    return Check("status", True, f"status {STATUS_DONE:#010x}, written last at cycle {cycle}")


def check_done_order(layout: ImageLayout, obs: Observation) -> Check:
    """DONE accepted strictly after the status write was accepted; nothing written after DONE."""
    if obs.done_cycle is None:
        return Check("done_after_status", False, "no DONE to order")
    st = [w for w in obs.writes if w[1] == layout.status_addr]
    if not st:
        return Check("done_after_status", False, "DONE came but the status block was never written")
    before = [w for w in st if w[0] < obs.done_cycle]
    if not before:
        return Check("done_after_status", False,
                     f"DONE accepted at cycle {obs.done_cycle}, but the status write was accepted at cycle "
                     f"{st[0][0]} (SPEC §2: DONE only after the final status write has been accepted)")
    late = [w for w in obs.writes if w[0] >= obs.done_cycle]
    if late:
        c, a, _, _ = late[0]
        return Check("done_after_status", False,
                     f"{len(late)} write(s) accepted at or after DONE (cycle {obs.done_cycle}), first at cycle {c} "
                     f"to {a:#x} ({region_of(layout, a)})")
    return Check("done_after_status", True,
                 f"status write at cycle {before[-1][0]}, DONE at cycle {obs.done_cycle}")


def check_addr_errors(layout: ImageLayout, addr_errors: int, first: tuple[int, str, int] | None) -> Check:
    if addr_errors == 0:
        return Check("addr_errors", True, "no address errors")
    where = ""
    if first is not None:
        c, kind, a = first
        why = "not 16-byte aligned" if a % BEAT else f"beat outside the {layout.size}-byte memory"
        where = f"; first: {kind} at cycle {c}, address {a:#x} ({why})"
    return Check("addr_errors", False, f"{addr_errors} address error(s){where}")


def check_dense_floor(read_beats: int, dense_bytes: int) -> Check:
    got = read_beats * BEAT
    ok = got >= dense_bytes
    msg = (f"read {read_beats} beats = {got} B {'>=' if ok else '<'} the dense-tensor floor {dense_bytes} B")
    return Check("dense_floor", ok, msg if ok else msg + " (SPEC §7: reading less is a protocol violation)")


def check_bit_exact(chip_logits: np.ndarray, ref_logits: np.ndarray) -> tuple[Check, Divergence | None]:
    div = first_divergence(chip_logits, ref_logits)
    rows = len(ref_logits)
    if div is None:
        return Check("bit_exact", True, f"all {rows} logits rows equal the fixed model"), None
    return Check("bit_exact", False, div.describe(rows)), div


def check_generated_tokens(layout: ImageLayout, final_mem: bytes, ref_tokens: np.ndarray) -> Check:
    """Generate mode: the token array after the run holds the prompt and every fed-back argmax."""
    chip = np.frombuffer(final_mem, "<u4", count=layout.seq_len, offset=layout.tokens_addr).astype(np.int64)
    bad = np.flatnonzero(chip != ref_tokens)
    if not bad.size:
        return Check("generated_tokens", True, f"token array: the prompt ({layout.prompt_len}) and "
                     f"{layout.seq_len - layout.prompt_len} fed-back argmax ids equal the fixed model's")
    p = int(bad[0])
    return Check("generated_tokens", False, f"token entry {p} is {int(chip[p])}, fixed model {int(ref_tokens[p])} "
                 f"({bad.size} entries differ)")


def check_argmax_words(chip_argmax: np.ndarray, ref_argmax: np.ndarray) -> Check:
    chip, ref = np.asarray(chip_argmax, np.int64), np.asarray(ref_argmax, np.int64)
    bad = np.flatnonzero(chip != ref)
    if bad.size == 0:
        return Check("argmax_words", True, f"all {len(ref)} argmax words equal the fixed model")
    p = int(bad[0])
    return Check("argmax_words", False, f"argmax word of position {p} is {int(chip[p])}, fixed model {int(ref[p])}; "
                                        f"{bad.size} of {len(ref)} positions differ")


@dataclass(frozen=True)
class Precision:
    min_cosine: float
    worst_row: int
    argmax_correct: int
    rows: int

    @property
    def argmax_agreement(self) -> float:
        return self.argmax_correct / self.rows if self.rows else 0.0


def precision(chip_logits: np.ndarray, golden: np.ndarray) -> Precision:
    """SPEC §7 metrics of one run: min row cosine (float64, zero row = 0) and argmax picks counted correct."""
    cos = row_cosines(chip_logits, golden)                              # (T,)
    picks = np.argmax(np.asarray(chip_logits, np.float64), axis=1)     # lowest index on ties
    correct = pick_correct(picks, golden)                               # (T,) bool
    w = int(np.argmin(cos))
    return Precision(float(cos[w]), w, int(correct.sum()), len(cos))


def check_cosine(p: Precision) -> Check:
    ok = p.min_cosine >= COSINE_GATE
    return Check("cosine", ok, f"min row cosine {p.min_cosine:.8f} (row {p.worst_row}, 1 - cos = "
                               f"{1 - p.min_cosine:.2e}) {'>=' if ok else '<'} gate {COSINE_GATE}")


def check_argmax_agreement(p: Precision) -> Check:
    ok = p.argmax_agreement >= ARGMAX_GATE
    return Check("argmax_agreement", ok, f"argmax agreement {p.argmax_agreement:.4f} ({p.argmax_correct}/{p.rows}) "
                                         f"{'>=' if ok else '<'} gate {ARGMAX_GATE}")


def compare_output_regions(a: bytes, b: bytes, layout: ImageLayout, what: str = "outputs") -> Check:
    """Byte-identical output regions (logits, argmax, status) of two runs of the same image."""
    lo, hi = output_span(layout)
    if len(a) != hi - lo or len(b) != hi - lo:
        return Check("identical_outputs", False, f"{what}: region sizes {len(a)} / {len(b)}, expected {hi - lo}")
    if a == b:
        return Check("identical_outputs", True, f"{what}: all {hi - lo} output bytes identical")
    diff = np.flatnonzero(np.frombuffer(a, np.uint8) != np.frombuffer(b, np.uint8))
    k = int(diff[0])
    return Check("identical_outputs", False,
                 f"{what}: {diff.size} bytes differ, first at {lo + k:#x} ({region_of(layout, lo + k)}): "
                 f"{a[k]:#04x} vs {b[k]:#04x}")


# ------------------------------------------------------------------------------------------------
# The report of one run


@dataclass
class RunReport:
    run: RunSpec
    checks: list[Check]
    cycles: int | None
    stats: dict
    timeout: bool
    precision: Precision | None
    divergence: Divergence | None
    rand_reset: bool

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def cycles_per_token(self) -> float | None:
        return self.cycles / self.run.seq_len if self.cycles else None

    @property
    def tokens_per_s(self) -> float | None:
        cpt = self.cycles_per_token
        return self.run.clock_hz / cpt if cpt else None

    def failures(self) -> list[str]:
        return [f"{c.name}: {c.message}" for c in self.checks if not c.passed]

    def as_dict(self) -> dict:
        t = self.run.timing
        p = self.precision
        return {
            "name": self.run.name + (RAND_RESET_SUFFIX if self.rand_reset else ""),
            "run": self.run.to_dict(), "profile": self.run.profile, "prompt_index": self.run.prompt_index,
            "timing": {"base": t.base, "jitter": t.jitter, "ready_drop": t.ready_drop},
            "rand_reset": self.rand_reset, "passed": self.passed,
            "cycles": self.cycles, "cycles_per_token": self.cycles_per_token, "tokens_per_s": self.tokens_per_s,
            "read_beats": self.stats.get("read_beats"), "write_beats": self.stats.get("write_beats"),
            "addr_errors": self.stats.get("addr_errors"), "stall_cycles": self.stats.get("stall_cycles"),
            "timeout": self.timeout, "stats": self.stats,
            "bit_exact": self.divergence is None and p is not None,
            "first_divergence": dataclasses.asdict(self.divergence) if self.divergence else None,
            "min_cosine": p.min_cosine if p else None, "worst_row": p.worst_row if p else None,
            "argmax_correct": p.argmax_correct if p else None, "rows": p.rows if p else None,
            "argmax_agreement": p.argmax_agreement if p else None,
            "checks": [c.as_dict() for c in self.checks],
        }


def check_run(run: RunSpec, layout: ImageLayout, final_mem: bytes, obs: Observation, ref: Reference) -> RunReport:
    """Every SPEC §2/§3/§4.5/§7 gate of one run, from the final memory and what the ports saw, and the
    decoder order (no position's input read before the previous position's argmax word)."""
    from verification.decoder_order import check_decoder_order
    checks = [check_completion(obs, run.max_cycles)]
    logits, argmax, status = read_output_arrays(final_mem, layout)
    checks.append(check_status(layout, status, obs.writes))
    checks.append(check_done_order(layout, obs))
    checks.append(check_addr_errors(layout, obs.stats.get("addr_errors", 0), obs.first_addr_error))
    checks.append(check_dense_floor(obs.stats.get("read_beats", 0), weight_bytes(layout.cfg).dense))
    checks.append(check_decoder_order(layout, final_mem, obs.reads, obs.writes))      # verification/decoder_order.py
    exact, div = check_bit_exact(logits, ref.fixed_logits)
    checks.append(exact)
    checks.append(check_argmax_words(argmax, ref.fixed_argmax))
    if layout.generates:
        checks.append(check_generated_tokens(layout, final_mem, ref.fixed_tokens))
    prec = precision(logits, ref.golden_logits)
    checks += [check_cosine(prec), check_argmax_agreement(prec)]
    return RunReport(run, checks, obs.cycles, obs.stats, obs.timeout or obs.done_cycle is None, prec, div,
                     obs.rand_reset)


# ------------------------------------------------------------------------------------------------
# The cocotb side: memory, reset, command, response monitor


class ChipMemory(MemoryModel):
    """The SPEC §3 memory model, also remembering the first out-of-range or misaligned request and every
    read (cycle, address), for the decoder-order monitor (``check_decoder_order``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.first_addr_error: tuple[int, str, int] | None = None
        self.reads: list[tuple[int, int]] = []

    def _accept(self, cycle: int, write: int, addr: int, wdata: int, wstrb: int) -> None:
        if self.first_addr_error is None and not self.in_range(addr):
            self.first_addr_error = (cycle, "write" if write else "read", addr)
        if not write:
            self.reads.append((cycle, addr))
        super()._accept(cycle, write, addr, wdata, wstrb)


class ChipTB:
    """Clock, reset, RUN command, DONE monitor and the memory model for one run of ``msh_chip_top``."""

    def __init__(self, dut, run: RunSpec, image: Image, *, progress_every: int = 100_000):
        for port in ("clk", "rst_n", "cmd_data", "cmd_valid", "cmd_ready", "rsp_data", "rsp_valid", "rsp_ready"):
            if not hasattr(dut, port):
                raise AttributeError(f"top level has no port {port!r}: not the SPEC §1 msh_chip_top port list")
        assert len(dut.cmd_data) == 32 and len(dut.rsp_data) == 32, "cmd_data / rsp_data must be 32 bits"
        assert len(dut.mem_req_addr) == 36, f"mem_req_addr must be 36 bits, got {len(dut.mem_req_addr)}"
        assert len(dut.mem_req_wdata) == 8 * BEAT and len(dut.mem_rsp_rdata) == 8 * BEAT
        assert len(dut.mem_req_wstrb) == BEAT
        self.dut, self.run_spec, self.image = dut, run, image
        self.progress_every = progress_every
        self.mem = ChipMemory(dut, dut.clk, image.data, timing=run.timing, seed=run.seed, config=run.config,
                              prompt_index=run.prompt_index, prefix="mem_")

    async def run(self) -> Observation:
        import cocotb
        from cocotb.clock import Clock
        from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

        dut, run, log = self.dut, self.run_spec, self.dut._log
        obs = Observation(rand_reset=any(k.startswith(RAND_RESET_PLUSARG) for k in cocotb.plusargs))
        Clock(dut.clk, run.clock_ns, unit="ns").start()
        dut.rst_n.value = 0
        dut.cmd_valid.value = 0
        dut.cmd_data.value = 0
        dut.rsp_ready.value = 1                      # SPEC §1: the testbench keeps it 1
        dut.mem_req_ready.value = 0
        dut.mem_rsp_valid.value = 0
        dut.mem_rsp_rdata.value = 0
        await ClockCycles(dut.clk, RESET_CYCLES)
        dut.rst_n.value = 1
        self.mem.start()                             # counts edges from here, as the loop below does
        dut.cmd_data.value = CMD_RUN
        dut.cmd_valid.value = 1
        cycle, stop_at = 0, None       # cycle k = after rising edge k; sampled now, it transfers on edge k + 1
        while True:
            await ReadOnly()
            if obs.run_cycle is None and int(dut.cmd_ready.value):
                obs.run_cycle = cycle
                log.info(f"{run.name}: RUN accepted at cycle {cycle}")
            if int(dut.rsp_valid.value):
                word = int(dut.rsp_data.value)
                obs.responses.append((cycle, word))
                if word == RSP_DONE and obs.done_cycle is None:
                    obs.done_cycle = cycle
                    stop_at = cycle + DRAIN_CYCLES
                    log.info(f"PROGRESS {run.name}: DONE after {cycle - (obs.run_cycle or 0)} cycles")
            start = obs.run_cycle if obs.run_cycle is not None else 0
            if stop_at is None and cycle - start >= run.max_cycles:
                obs.timeout = True
                log.warning(f"{run.name}: timeout, no DONE after {run.max_cycles} cycles")
                break
            if stop_at is not None and cycle >= stop_at:
                break
            if self.progress_every and cycle and cycle % self.progress_every == 0:
                st = self.mem.stats
                log.info(f"PROGRESS {run.name}: cycle {cycle - start}, read beats {st.read_beats}, "
                         f"write beats {st.write_beats}")
            await RisingEdge(dut.clk)
            cycle += 1
            if obs.run_cycle is not None and cycle == obs.run_cycle + 1:
                dut.cmd_valid.value = 0              # exactly one command is ever sent
                dut.cmd_data.value = 0
            if obs.done_cycle is not None and cycle == obs.done_cycle + 1:
                obs.stats = self.mem.stats.as_dict()  # every sample up to the DONE cycle is in
        self.mem.stop()
        if not obs.stats:
            obs.stats = self.mem.stats.as_dict()
        obs.writes = list(self.mem.stats.writes)
        obs.reads = list(self.mem.reads)
        obs.first_addr_error = self.mem.first_addr_error
        return obs

    def final_memory(self) -> bytes:
        return bytes(self.mem.mem)


def save_report(report: RunReport, final_mem: bytes, layout: ImageLayout, out_dir: Path) -> Path:
    """<out>/<name>.json (the report) and <out>/<name>.outputs.bin (logits..status bytes)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    d = report.as_dict()
    lo, hi = output_span(layout)
    (out_dir / f"{d['name']}.outputs.bin").write_bytes(final_mem[lo:hi])
    path = out_dir / f"{d['name']}.json"
    path.write_text(json.dumps(d, indent=2))
    return path
