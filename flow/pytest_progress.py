"""pytest plugin of ``make test`` (``-v -p flow.pytest_progress``): each test's line, written with its name
before the test runs, ends with how long the test took, ``PASSED [ 42%] (12.3 s)``, so a long run shows what
runs now and what took the time. Without ``-v`` it does nothing."""
from __future__ import annotations

import pytest


class _Durations:
    def __init__(self, reporter):
        self.reporter = reporter

    @pytest.hookimpl(trylast=True)          # after the terminal reporter has written the outcome
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self.reporter.write(f" ({report.duration:.1f} s)")


@pytest.hookimpl(trylast=True)              # once the terminal reporter is registered
def pytest_configure(config: pytest.Config) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and reporter.verbosity > 0:
        config.pluginmanager.register(_Durations(reporter), "pytest_progress_durations")
