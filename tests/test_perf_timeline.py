"""perf.timeline: position t's ops back to back from cycle 0 with the model's cycles, each on its engine's row;
the figure is drawn the same twice (the committed docs/figures/position_timeline.png is reproducible)."""
import pytest

from perf.model import model_for
from perf.timeline import ENGINE, figure, main, table, timeline


def test_timeline_is_the_models_position():
    model = model_for("tiny", 64)
    steps = timeline(model, 3)
    costs = model.position(3)
    assert [s.cycles for s in steps] == [c.cycles for c in costs]
    assert steps[0].start == 0 and all(b.start == a.start + a.cycles for a, b in zip(steps, steps[1:]))
    assert {s.engine for s in steps} <= set(ENGINE.values())
    assert steps[-1].label == "END" and any(s.label == "MV head -> logits writer" for s in steps)
    assert table(steps).splitlines()[len(steps) + 2] == f"{len(steps)} ops, {sum(c.cycles for c in costs):,} cycles"


def test_figure_is_reproducible(tmp_path):
    steps = timeline(model_for("tiny", 64), 0)
    for name in ("a.png", "b.png"):
        figure(steps, "tiny, position 0", tmp_path / name)
    assert (tmp_path / "a.png").stat().st_size > 10_000
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()


def test_position_out_of_range_is_refused(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--config", "tiny", "--position", "100000"])
    assert e.value.code == 2
    assert "--position must be in 0.." in capsys.readouterr().err
