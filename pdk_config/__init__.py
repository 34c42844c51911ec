"""Nangate45 facts: where the PDK lives and which of its files and cells the flow uses."""
from .nangate45 import Pdk, PdkError, find_pdk, pdk_from_env

__all__ = ["Pdk", "PdkError", "find_pdk", "pdk_from_env"]
