"""Verilog generation: the only place that calls ``amaranth.back.verilog.convert``.

``BLOCKS`` is the registry of generatable blocks (name -> how to build it from a ``ChipParams``);
``emit`` writes ``<top>.v``, a file list ``<top>.f`` (paths relative to itself: use ``verilator -F``)
and ``config.json`` (resolved parameters, hash, tool versions, block and top names, stream layouts).
"""
from rtl_gen.emit import BLOCKS, Block, Emitted, block, emit, read_config, read_filelist

__all__ = ["BLOCKS", "Block", "Emitted", "block", "emit", "read_config", "read_filelist"]
