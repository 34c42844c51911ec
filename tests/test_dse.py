"""flow.dse: the space declared on ChipParams, the front, and two real sweeps on Ray (the ``ci`` DSE preset: the
ci model's cycles, the vector unit block's area, seconds a trial): 4 trials on a local Ray, then 2 on a second
Ray node this test starts with ``ray start --head`` and joins through ``--address``."""
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flow.dse.cli import main as dse_main
from flow.dse.front import changes, pareto
from flow.dse.space import PRESETS, DsePreset, dse_preset
from flow.dse.store import Results
from flow.dse.sweep import RESULTS_FILE, DseError, run_sweep, space_size
from flow.dse.trial import budget_reasons
from flow.synth.spec import AREA_BUDGET_UM2
from hw.params import ChipParams, sweep_space

CI = dse_preset("ci")


def test_space_is_declared_on_chip_params():
    space = sweep_space()
    assert {"mac_banks", "norm_lanes", "ew_lanes", "mix_lanes", "comb_lanes", "kda_lanes"} <= set(space)
    assert "clock_ns" not in space and "act_bits" not in space
    for name, values in space.items():
        for v in values:
            assert getattr(ChipParams(**{name: v}), name) == v
    with pytest.raises(ValueError, match=r"norm_lanes must be one of 1, 2, 4, 8, 16, got 3"):
        ChipParams(norm_lanes=3)


def test_presets_search_only_declared_values():
    for p in PRESETS.values():
        for name, values in p.space().items():
            assert set(values) <= set(sweep_space()[name]), (p.name, name)
    assert PRESETS["nano"].space() == sweep_space()
    assert space_size(CI) == 6
    with pytest.raises(ValueError, match=r"'clock_ns' is not a swept ChipParams field; valid: mac_banks"):
        DsePreset("bad", chip="ci", fields=("clock_ns",))
    with pytest.raises(ValueError, match=r"subset of ew_lanes must be some of \(1, 2, 4\), got \(3,\)"):
        DsePreset("bad", chip="ci", subset={"ew_lanes": (3,)})
    with pytest.raises(ValueError, match=r"norm_lanes=4 is outside the space of DSE preset 'ci': \(1, 2\)"):
        CI.params({"norm_lanes": 4, "ew_lanes": 1})
    with pytest.raises(ValueError, match="unknown DSE preset 'huge'; valid: ci, nano, tiny"):
        dse_preset("huge")


def _row(n, area, tps, within=True, status="ok"):
    return {"number": n, "status": status, "within_budget": within, "area_mm2": area, "tokens_per_s": tps}


def test_pareto_keeps_the_non_dominated_within_budget_points():
    rows = [_row(1, 1.0, 10), _row(2, 2.0, 30), _row(3, 1.5, 5), _row(4, 3.0, 30), _row(5, 0.5, 99, within=False),
            _row(6, 2.5, 40), _row(7, None, None, status="illegal"), _row(8, 2.0, 20)]
    assert [r["number"] for r in pareto(rows)] == [1, 2, 6]


def test_budget_reasons_name_each_broken_budget():
    rec = {"area_um2": AREA_BUDGET_UM2 * 1.01, "macro_bits": 1, "slow_wns_ns": -0.25, "period_ns": 10.0}
    reasons = budget_reasons(rec)
    assert len(reasons) == 2 and reasons[0].startswith("area 4.040 mm2 > 4.0 mm2")
    assert reasons[1] == "slow-corner WNS -0.25 ns at 10.0 ns"
    assert budget_reasons(rec | {"area_um2": 1.0, "slow_wns_ns": 0.1}) == []


@pytest.fixture(scope="module")
def part_cache(tmp_path_factory):
    """One synthesis part cache for both sweeps: the second one's engines are the first one's."""
    return tmp_path_factory.mktemp("dse_cache")


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory, part_cache):
    """Two trials, then resumed to four (as after an interruption): the first two stay as they were."""
    out = tmp_path_factory.mktemp("dse_local")
    argv = ["--preset", "ci", "--out", str(out), "--cache", str(part_cache), "--min-free-gb", "0.5"]
    assert dse_main([*argv, "--trials", "2"]) == 0
    first = Results(out / RESULTS_FILE).trials("ci")
    assert dse_main([*argv, "--trials", "4", "--resume"]) == 0
    assert Results(out / RESULTS_FILE).trials("ci")[:2] == first
    return out, [*argv, "--trials", "4"]


def test_local_sweep_records_four_measured_trials(local_sweep):
    out, _ = local_sweep
    rows = Results(out / RESULTS_FILE).trials("ci")
    assert len(rows) == 4 and len({r["key"] for r in rows}) == 4
    assert rows[0]["point"] == CI.current()                       # the sweep starts with the current chip
    for r in rows:
        assert r["status"] == "ok", r["reason"]
        assert r["area_um2"] > r["macro_um2"] > 0 and r["logic_um2"] > 0 and r["cells"] > 0
        assert r["model_cycles"] > 0 and r["cycles_per_token"] == pytest.approx(r["model_cycles"] / r["seq_len"])
        assert r["tokens_per_s"] == pytest.approx(1e9 / ChipParams().clock_ns / r["cycles_per_token"])
        assert r["slow_wns_ns"] is not None and r["parts"] >= 1 and r["engines"]
    # engines' areas add up to the priced logic area; distinct points differ in area
    for r in rows:
        assert sum(r["engines"].values()) == pytest.approx(r["logic_um2"], rel=1e-6)
    assert len({round(r["area_um2"]) for r in rows}) == 4


def test_local_sweep_writes_plot_and_front_table(local_sweep):
    out, _ = local_sweep
    rows = Results(out / RESULTS_FILE).trials("ci")
    md = (out / "front.md").read_text()
    front = pareto(rows)
    assert front and (out / "pareto.png").stat().st_size > 10_000
    for r in front:
        assert f"| {r['number']} | {r['area_mm2']:.3f} | {r['tokens_per_s']:,.0f} |" in md
        assert changes(r["point"], CI) in md


def test_report_has_the_sweep_section(local_sweep, tmp_path):
    from flow.report_dse import PLOT, md_dse
    out, _ = local_sweep
    build, report = tmp_path / "build", tmp_path / "report"
    report.mkdir()
    assert md_dse(build, report)[2] == "not run: `make dse` (python -m flow.dse)"
    (build / "dse").mkdir(parents=True)
    for f in ("front.md", "pareto.png"):
        (build / "dse" / f).write_bytes((out / f).read_bytes())
    md = "\n".join(md_dse(build, report))
    assert f"![Pareto front of the sweep]({PLOT})" in md and (report / PLOT).is_file()
    assert "### Pareto front (measured, within every budget)" in md


def test_a_finished_sweep_is_resumed_not_repeated(local_sweep, capsys):
    out, argv = local_sweep
    assert dse_main(argv) == 2
    assert "already holds 4 trial(s) of preset 'ci': pass --resume" in capsys.readouterr().err
    assert dse_main([*argv, "--resume"]) == 0
    assert Results(out / RESULTS_FILE).count("ci") == 4
    assert dse_main(["--preset", "ci", "--trials", "7", "--out", str(out)]) == 2
    assert "--trials must be an integer in 1..6" in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:      # every process of the group has ended
        pass


@pytest.fixture
def ray_head(monkeypatch):
    """A second Ray node (1 CPU, 100 MB object store) started in its own process group, stopped after. Token
    authentication on both sides (Ray never turns it on for a client given an explicit address by itself)."""
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    port = _free_port()
    ray_cli = Path(sys.executable).parent / "ray"
    # the token a local ray.init would have made: ~/.ray/auth_token, unless one exists
    subprocess.run([str(ray_cli), "get-auth-token", "--generate"], check=True, capture_output=True, timeout=60)
    proc = subprocess.Popen([str(ray_cli), "start", "--head", "--block", f"--port={port}", "--num-cpus=1",
                             "--object-store-memory=100000000", "--include-dashboard=false", "--disable-usage-stats"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:                 # the head's GCS port answers (`ray status` would need Ray's auth token)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "ray start --head did not come up"
                time.sleep(1)
        yield address
    finally:                        # the group holds only the processes this fixture started
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)         # ray stops its processes within ~30 s; none of them is needed after
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()


def test_address_joins_a_running_ray_node(ray_head, tmp_path, part_cache):
    import ray
    results = run_sweep(CI, 2, tmp_path, part_cache, address=ray_head)
    rows = results.trials("ci")
    assert len(rows) == 2 and all(r["status"] == "ok" for r in rows)
    ray.init(address=ray_head, log_to_driver=False)
    try:
        nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    finally:
        ray.shutdown()
    assert len(nodes) == 1 and {r["ray_node"] for r in rows} == nodes      # the trials ran on that node


def test_a_bad_address_is_named(tmp_path):
    with pytest.raises(DseError, match="cannot join a Ray cluster at '127.0.0.1:1'"):
        run_sweep(CI, 1, tmp_path, tmp_path / "cache", address="127.0.0.1:1")


def test_reuse_names_the_engines_a_point_changes(tmp_path):
    from flow.dse.reuse import compare
    same = compare(CI, {"ew_lanes": 1}, tmp_path)                # the current chip against itself
    assert same["modules"][0] == 0 and set(same["engines"]) >= {"vector_unit.ew", "vector_unit.norm"}
    assert not any(same["engines"].values())
    other = compare(CI, {"ew_lanes": 2}, tmp_path)
    assert other["engines"]["vector_unit.ew"] > 0 and other["point"] == {"norm_lanes": 1, "ew_lanes": 2}


def test_an_interrupted_validation_goes_on_where_it_stopped(local_sweep, tmp_path, monkeypatch, capsys):
    """validate --top K measures each front point once: points with a validation row are not measured again (a
    nano point costs a chip simulation and a 30-minute flat synthesis), and are still in what it returns."""
    import shutil

    from flow.dse import validate as validation
    out = tmp_path / "dse"
    shutil.copytree(local_sweep[0], out)
    measured = []

    def fake_point(preset, rec, where, jobs):
        measured.append(rec["key"])
        return {"key": rec["key"], "preset": preset.name, "point": rec["point"], "model_cycles": rec["model_cycles"],
                "sim_cycles": rec["model_cycles"], "cycles_error": 0.0, "bit_exact": True,
                "parts_area_um2": rec["area_um2"], "full_area_um2": rec["area_um2"], "area_error": 0.0,
                "passed": True, "reason": None}
    monkeypatch.setattr(validation, "validate_point", fake_point)
    front = sorted(pareto(Results(out / RESULTS_FILE).trials("ci")), key=lambda r: -r["tokens_per_s"])
    first = validation.validate(CI, out, top=1)
    assert measured == [front[0]["key"]] and [v["key"] for v in first] == measured
    both = validation.validate(CI, out, top=min(2, len(front)))
    assert measured == [r["key"] for r in front[:2]] and [v["key"] for v in both] == measured
    assert f"trial {front[0]['number']} was validated before (passed)" in capsys.readouterr().err
    assert len(Results(out / RESULTS_FILE).validations("ci")) == len(measured)
