"""Storage helpers of the chip top: one ``msh_sram`` instance with named port signals (SPEC §5).

``Sram(m, name, depth, width)`` instantiates the macro inside module ``m`` and returns an object whose
``w_en/w_addr/w_data/w_strb`` and ``r_en/r_addr/r_data`` signals the caller drives (``r_data`` is valid
the cycle after ``r_en`` and holds until the next read). The chip's arrays built on it:

* the vector register file (VRF): ``n_slots × slot_words`` words of ``LANES`` X elements (one word
  = 16 elements of 32 bits = 512 bits); element i of slot s is lane ``i % 16`` of word
  ``s·slot_words + i // 16``. Every write carries byte strobes, so single elements are written in place.
* the two parameter buffers (PRF a / b), one weight-store transfer per word;
* the descriptor table (store beat index of every record) and the token ids.
"""
from __future__ import annotations

from amaranth.hdl import ClockSignal, Instance, Module, Signal


def addr_bits(depth: int) -> int:
    return max(1, (depth - 1).bit_length())


class Sram:
    """An ``msh_sram`` (depth × width, width a multiple of 8) and its port signals."""

    def __init__(self, m: Module, name: str, depth: int, width: int):
        if not isinstance(depth, int) or depth < 2:
            raise ValueError(f"{name}: depth must be an integer >= 2 (SPEC §5 model minimum), got {depth!r}")
        if not isinstance(width, int) or width < 8 or width % 8:
            raise ValueError(f"{name}: width must be a positive multiple of 8 (SPEC §5), got {width!r}")
        self.depth, self.width, self.abits = depth, width, addr_bits(depth)
        self.w_en = Signal(name=f"{name}_we")
        self.w_addr = Signal(self.abits, name=f"{name}_waddr")
        self.w_data = Signal(width, name=f"{name}_wdata")
        self.w_strb = Signal(width // 8, name=f"{name}_wstrb")
        self.r_en = Signal(name=f"{name}_re")
        self.r_addr = Signal(self.abits, name=f"{name}_raddr")
        self.r_data = Signal(width, name=f"{name}_rdata")
        m.submodules[name] = Instance(
            "msh_sram", p_DEPTH=depth, p_WIDTH=width, p_ADDRW=self.abits, i_clk=ClockSignal(),
            i_we=self.w_en, i_waddr=self.w_addr, i_wdata=self.w_data, i_wstrb=self.w_strb,
            i_re=self.r_en, i_raddr=self.r_addr, o_rdata=self.r_data)

    @property
    def bits(self) -> int:
        return self.depth * self.width
