"""What every engine uses: the fixed-latency pipeline convention and its register helpers
(``hw.lib.pipe``), the LUT functions (``hw.lib.lut``) and the msh_rom ports engines share (``hw.lib.lut_rom``)."""
