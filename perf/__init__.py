"""The chip's performance model: pure Python that predicts msh_chip_top's cycles from the engines'
parameters (``perf.model``). Not hardware: it reads ``hw`` for constants and elaborates nothing."""
