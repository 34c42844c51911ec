"""The chip's ROM files: where ``$readmemh`` finds them, and the checksum the chip verifies them by.

Paths (SPEC §5): every ``msh_rom`` INIT_FILE is ``rtl/roms/<x>.hex``, relative to the working directory of
the simulator or synthesis tool, which is the parent of the emitted RTL folder seen as ``rtl/`` (an
outside evaluator copies the folder as ``rtl/`` and runs ``verilator -f rtl/filelist.f`` beside it; the
project's runners link ``rtl`` to the folder they emitted). ``ROM_DIR`` is the one place this path is
written down; the emitted folder holds the files in its ``roms/`` (``ROM_SUBDIR``).

Checksum (``rom_checksum``): ``acc = rotate_left(acc, 1) ^ word`` over the ROM's words in address order,
from ``acc = 0``, on ``bits``-wide words (each zero-extended). A changed word at address i changes the
result by that word's difference rotated by depth − 1 − i, never zero, so any single changed word is
caught; an all-zero ROM (a file that was not found reads as zeros) sums to 0, so ``RomImage`` refuses a
table whose checksum is 0. ``hw.rom_check.RomCheck`` computes the same sum in the chip's load phase.
"""
from __future__ import annotations

from dataclasses import dataclass, field

RTL_DIR = "rtl"                      # the emitted RTL folder, as the tools see it from their working directory
ROM_SUBDIR = "roms"                  # the ROM files' folder inside it
ROM_DIR = f"{RTL_DIR}/{ROM_SUBDIR}"  # what every INIT_FILE starts with


def init_file(name: str, rom_dir: str = ROM_DIR) -> str:
    """The INIT_FILE of ROM file ``name`` (e.g. ``sigmoid_even.hex``)."""
    return f"{rom_dir.rstrip('/')}/{name}"


def rom_checksum(words, bits: int) -> int:
    """``acc = rotate_left(acc, 1) ^ word`` over ``words`` (each < 2**bits), from 0, in ``bits`` bits."""
    mask = (1 << bits) - 1
    acc = 0
    for w in words:
        w = int(w)
        if not 0 <= w <= mask:
            raise ValueError(f"ROM word {w:#x} does not fit {bits} bits")
        acc = (((acc << 1) | (acc >> (bits - 1))) & mask) ^ w
    return acc


@dataclass(frozen=True)
class RomImage:
    """One msh_rom instance as the generator knows it: its name in the chip, its file, shape and contents."""

    name: str                  # instance (or table) name, for messages and config.json
    file: str                  # file name under ROM_DIR
    depth: int
    width: int
    words: tuple[int, ...] = field(repr=False)

    def __post_init__(self):
        if len(self.words) != self.depth:
            raise ValueError(f"ROM {self.name} ({self.file}): {len(self.words)} words for DEPTH {self.depth}")
        if self.width % 8 or self.width < 8:
            raise ValueError(f"ROM {self.name} ({self.file}): WIDTH {self.width} is not a multiple of 8")

    def checksum(self, bits: int) -> int:
        """``rom_checksum`` in ``bits`` (>= width) bits; refuses a table that an all-zero ROM would match."""
        if bits < self.width:
            raise ValueError(f"ROM {self.name} ({self.file}): checksum of {bits} bits < WIDTH {self.width}")
        acc = rom_checksum(self.words, bits)
        if acc == rom_checksum([0] * self.depth, bits):
            raise ValueError(f"ROM table {self.name} ({self.file}): its checksum equals that of an all-zero ROM, "
                             f"so a missing file would pass the check")
        return acc
