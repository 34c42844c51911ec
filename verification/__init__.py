"""Verification: cocotb + Verilator testbenches, simulation models of the storage macros, the runner."""
