"""Logic synthesis of the emitted RTL onto Nangate45 with pyosys (native Yosys as a Python module).

    python -m flow.synth --rtl build/rtl [--out build/synth] [--cache build/synth_cache] [--top NAME]
                         [--flatten] [--jobs N]

Reads ``config.json`` and the file list that ``python -m rtl_gen`` wrote into the RTL folder, and maps
the design to the Nangate45 typical-corner liberty. ``msh_sram`` / ``msh_rom`` are black boxes (the
environment supplies them, SPEC_NANO_KPU.md section 5); every other inferred memory is an error.

Hierarchy: the design is synthesised hierarchically (no ``flatten``), so each Verilog module is mapped on
its own and ``stat`` reports its cells. The breakdown in ``synth.json`` is computed from that: per module
its own cells and area, per instance path the area including everything below it ("engines" = the top
module's direct children, or those of the single instance that wraps them all). ``--flatten`` maps the
design as one module, as the benchmark does; it optimises across module boundaries but leaves only the top
in the breakdown.

Parts (``partition``): Yosys is single-threaded, so the design is cut into parts (each engine with everything
below it, and the rest of the design with the engines as black boxes) that ``--jobs`` Yosys processes map side
by side, largest first. Each part reads only its own modules and its black boxes' port lists (``sources``), so
its netlist depends on its own Verilog alone; ``--flatten`` is one part.

Cache (``cache``): each part's netlists and report data are kept in ``<out>_cache/<digest>/`` (``make clean``
removes it with build/), the digest covering that part's Verilog, options, liberty, scripts and the pyosys
version; a part whose digest is there is not mapped again, so editing one engine maps that engine's part
only. synth.json's ``parts`` says per part whether it was reused and its digest. A whole result made from
the same inputs (``inputs_sha256``) is reused as it stands: ``make sta`` after ``make synth`` maps nothing.
Measured on the nano chip (1.88M cells, 16 parts, ``--jobs 2`` on the loaded 2-core machine): 27 min cold
(kda's part alone 19 min), 47 s after an edit of the norm engine (its part: 42 s), 16 s after a comment in
the router (merged netlists byte-identical to the cold ones), 4 s with every part cached.

Files: ``spec`` (SPEC facts, the error), ``inputs`` (RTL folder, file list, clock, liberty areas),
``partition``, ``sources`` (the Verilog split by module), ``worker`` (the Yosys children), ``cache``,
``runner`` (children and cache together), ``results`` (merge, synth.json, synth.txt), ``driver``
(``synthesize``, the command line). All outputs are written into ``<out>.tmp`` and replace ``<out>`` only
when everything succeeded.
"""
from flow.synth.spec import (AREA_BUDGET_UM2, CORNER, MACRO_STUBS, MACROS, SRAM_BUDGET_BITS, UM2_PER_MIBIT,
                             SynthError, progress)
from flow.synth.inputs import (RtlInput, abc_period_ps, design_period_ns, liberty_areas, load_rtl,
                               read_filelist, rtl_clock_ns)
from flow.synth.partition import Part, partition
from flow.synth.results import RESULT_SCHEMA, build_result, summary_text
from flow.synth.driver import main, synthesize

__all__ = ["AREA_BUDGET_UM2", "CORNER", "MACRO_STUBS", "MACROS", "SRAM_BUDGET_BITS", "UM2_PER_MIBIT", "SynthError",
           "progress", "RtlInput", "abc_period_ps", "design_period_ns", "liberty_areas", "load_rtl", "read_filelist",
           "rtl_clock_ns", "Part", "partition", "RESULT_SCHEMA", "build_result", "summary_text", "main", "synthesize"]
