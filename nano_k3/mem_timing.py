"""The SPEC_NANO_KPU.md §3 memory's read timing profiles, written down once: the cocotb memory model
(verification/mem_model.py) runs them, the performance model (perf/model.py) predicts with the long one.

A read accepted at cycle k is due at ``max(k + base + jitter, due time of the previous read + 1)``,
jitter uniform in [0, J]; ``mem_req_ready`` is low with probability ``ready_drop`` per cycle.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    """A SPEC §3 timing profile."""

    base: int                 # base read latency
    jitter: int               # J: jitter uniform in [0, J]
    ready_drop: float = 0.0   # probability per cycle that mem_req_ready is low

    def __post_init__(self) -> None:
        if not isinstance(self.base, int) or self.base < 1:
            raise ValueError(f"base latency must be an integer ≥ 1, got {self.base!r}")
        if not isinstance(self.jitter, int) or self.jitter < 0:
            raise ValueError(f"jitter must be an integer ≥ 0, got {self.jitter!r}")
        if not 0.0 <= self.ready_drop < 1.0:
            raise ValueError(f"ready_drop must be in [0, 1), got {self.ready_drop!r}")


LONG_RUN = Timing(base=24, jitter=12, ready_drop=0.0)       # the throughput run
SHORT_RUN = Timing(base=24, jitter=24, ready_drop=0.05)     # correctness stress
ELASTIC_RUN = Timing(base=48, jitter=24, ready_drop=0.05)   # the short run at twice the base latency
