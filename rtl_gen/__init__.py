"""Verilog generation: Amaranth's RTLIL through ``lint_clean`` (Verilog that meets SPEC §7's lint gate).

``BLOCKS`` is the registry of generatable blocks (name -> how to build it from a ``ChipParams``);
``emit`` writes ``<top>.v``, a file list ``filelist.f`` (entries ``rtl/<file>``: run tools from the
folder's parent, SPEC §5) and ``config.json`` (resolved parameters, hash, tool versions, block and top
names, stream layouts).
"""
from rtl_gen.emit import BLOCKS, Block, Emitted, block, emit, read_config, read_filelist

__all__ = ["BLOCKS", "Block", "Emitted", "block", "emit", "read_config", "read_filelist"]
