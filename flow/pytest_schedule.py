"""pytest plugin of ``make test`` (``-p flow.pytest_schedule``, with pytest-xdist's ``--dist loadfile``): the test
files named by the ``long_files`` ini option (pyproject.toml, longest first) are handed out before all others.

pytest-xdist's file scheduling hands out files with many tests first and files with few tests last, and the suite's
longest files have few tests (the ci chip's whole physical flow is three tests on one fixture), so they would start
when the other worker has little left to do, and make test would end with one worker busy alone for a quarter of an
hour. Without xdist (``-n 0``) this plugin does nothing.
"""
from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("long_files", "test files (paths from the rootdir) make test's workers start first, longest first",
                  type="linelist", default=[])


def _first_scheduler(base: type, first: list[str]) -> type:
    class LongFilesFirst(base):
        """``base`` (xdist's file scheduler) that takes the next file from ``first`` while any is left."""

        def _assign_work_unit(self, node) -> None:
            for path in first:
                scope = next((s for s in self.workqueue if s.split("::", 1)[0] == path), None)
                if scope is not None:
                    self.workqueue.move_to_end(scope, last=False)
                    break
            super()._assign_work_unit(node)

    return LongFilesFirst


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling
    first = config.getini("long_files")
    return _first_scheduler(LoadFileScheduling, first)(config, log) if first else None
