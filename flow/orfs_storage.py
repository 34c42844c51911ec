"""The storage of the ORFS design: ``msh_macros.v``, the modules that stand in for the SPEC section 5
storage macros in place and route.

* ``msh_sram``: a dispatch module choosing, per DEPTH x WIDTH the chip uses, a wrapper of fakeram45
  macros (``sram_wrapper``, write priority, see ``SRAM_WRAPPER_NOTE``) or a flip-flop array
  (``sram_flops``), as flow/macro_map.py maps the shape;
* ``msh_rom``: a dispatch module choosing, per table (shape + INIT_FILE), a case statement generated
  from its hex file (``rom_module``; fakeram45 has no ROM).

``design_storage`` maps a design's storage instances (``Storage``); ``Storage.verilog`` writes the file.
flow/orfs.py puts it into the ORFS design; verification/physical_macros.py (``make sim MACROS=physical``)
simulates the chip with it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from flow.macro_map import Mapping, StorageLib, map_design

# ORFS stops synthesis when Yosys makes a memory ($mem) of more bits than SYNTH_MEMORY_MAX_BITS; this is
# its default (flow/scripts/variables.yaml of OpenROAD-flow-scripts).
ORFS_SYNTH_MEMORY_MAX_BITS = 4096

SRAM_WRAPPER_NOTE = """\
fakeram45 is single-ported (one addr_in for read and write); msh_sram has a read and a write port.
The wrapper gives the write priority: in a cycle with we=1 the macro address is waddr and a read
requested in that cycle (re=1) is dropped; rdata then keeps its previous value. Outside such
collisions the wrapper is cycle-exact to msh_sram: rdata is valid the cycle after re and holds its
value until the next read (a hold register, because fakeram45's rd_out may change on a write).
A simulation of the wrapper prints an error on every collision (`ifndef SYNTHESIS).
Shapes mapped to flip-flops (flow/macro_map.py) have both ports and behave exactly like msh_sram."""
# The wrapper's collision message after "ERROR: <instance>: msh_sram <D>x<W> " (verification/physical_macros.py
# counts these in a simulation log).
COLLISION_TEXT = "read and write in one cycle; the fakeram45 wrapper drops the read (flow/orfs.py)"


class OrfsError(RuntimeError):
    """The ORFS design could not be generated or run; the message says why and what to do."""


def _addrw(depth: int) -> int:
    return max(1, (depth - 1).bit_length())


# ---------------------------------------------------------------------------------------------- msh_sram

def sram_module_name(depth: int, width: int) -> str:
    return f"msh_sram_{depth}x{width}"


def sram_wrapper(m: Mapping) -> str:
    """One ``msh_sram_<D>x<W>`` module: ``rows`` x ``cols`` fakeram45 macros, write priority."""
    mac, depth, width = m.macro, m.depth, m.width
    if mac.depth & (mac.depth - 1):
        raise OrfsError(f"{mac.name}: depth {mac.depth} is not a power of two; the wrapper splits addresses by bits")
    aw, maw = _addrw(depth), _addrw(mac.depth)
    rows, cols = m.rows, m.cols
    rsel = max(1, aw - maw) if rows > 1 else 0
    nbytes = width // 8
    L = [f"// {depth} x {width} on {rows} x {cols} {mac.name} ({m.note}); write priority, see flow/orfs.py",
         f"module {sram_module_name(depth, width)} (",
         "    input  wire             clk,",
         "    input  wire             we,",
         f"    input  wire [{aw - 1}:0]     waddr,",
         f"    input  wire [{width - 1}:0]    wdata,",
         f"    input  wire [{nbytes - 1}:0]     wstrb,",
         "    input  wire             re,",
         f"    input  wire [{aw - 1}:0]     raddr,",
         f"    output wire [{width - 1}:0]    rdata",
         ");",
         f"    wire [{width - 1}:0] bit_mask;      // fakeram45 w_mask_in: 1 = write this bit",
         f"    wire [{aw - 1}:0] addr = we ? waddr : raddr;",
         "    wire rd = re & ~we;"]
    for b in range(nbytes):
        L.append(f"    assign bit_mask[{8 * b + 7}:{8 * b}] = {{8{{wstrb[{b}]}}}};")
    # Macro address: the low address bits, zero-extended when the instance is shallower than the macro.
    if aw >= maw:
        L.append(f"    wire [{maw - 1}:0] mac_addr = addr[{maw - 1}:0];")
    else:
        L.append(f"    wire [{maw - 1}:0] mac_addr = {{{maw - aw}'b0, addr}};")
    if rows > 1:
        L.append(f"    wire [{rsel - 1}:0] row = addr[{aw - 1}:{maw}];")
        L.append(f"    reg  [{rsel - 1}:0] row_q;")
    L.append("    reg rd_q;")
    L.append(f"    reg [{width - 1}:0] hold_q;")
    for r in range(rows):
        sel = f" & (row == {rsel}'d{r})" if rows > 1 else ""
        L.append(f"    wire ce_r{r} = (we | rd){sel};")
        L.append(f"    wire we_r{r} = we{sel};")
        L.append(f"    wire [{width - 1}:0] word_r{r};")
        for c in range(cols):
            lo, hi = c * mac.width, min(width, (c + 1) * mac.width) - 1
            sw, pad = hi - lo + 1, mac.width - (hi - lo + 1)
            q = f"q_r{r}_c{c}"
            wd = f"wdata[{hi}:{lo}]" if not pad else f"{{{pad}'b0, wdata[{hi}:{lo}]}}"
            wm = f"bit_mask[{hi}:{lo}]" if not pad else f"{{{pad}'b0, bit_mask[{hi}:{lo}]}}"
            L += [f"    wire [{mac.width - 1}:0] {q};",
                  f"    {mac.name} mem_r{r}_c{c} (",
                  f"        .clk(clk), .ce_in(ce_r{r}), .we_in(we_r{r}), .addr_in(mac_addr),",
                  f"        .wd_in({wd}), .w_mask_in({wm}), .rd_out({q}));",
                  f"    assign word_r{r}[{hi}:{lo}] = {q}[{sw - 1}:0];"]
    if rows > 1:
        L.append(f"    reg [{width - 1}:0] word;")
        L.append("    always @(*) begin")
        L.append("        case (row_q)")
        for r in range(rows):
            L.append(f"            {rsel}'d{r}: word = word_r{r};")
        L.append(f"            default: word = {{{width}{{1'b0}}}};")
        L.append("        endcase")
        L.append("    end")
    else:
        L.append(f"    wire [{width - 1}:0] word = word_r0;")
    L.append("    always @(posedge clk) begin")
    L.append("        rd_q <= rd;")
    if rows > 1:
        L.append("        if (rd) row_q <= row;")
    L.append("        if (rd_q) hold_q <= word;")
    L.append("    end")
    L.append("    assign rdata = rd_q ? word : hold_q;")
    L += ["`ifndef SYNTHESIS",
          "    always @(posedge clk)",
          "        if (re && we)",
          f'            $display("ERROR: %m: msh_sram {depth}x{width} {COLLISION_TEXT}");',
          "`endif",
          "endmodule", ""]
    return "\n".join(L)


def sram_flops(m: Mapping) -> str:
    """One ``msh_sram_<D>x<W>`` module of flip-flops, cycle-exact to the SPEC model (verification/models/
    msh_sram.v): byte-masked writes, rdata registered on re and held otherwise, a read of the word written
    in the same cycle returns the old contents. No array is declared, so no synthesis infers a memory."""
    depth, width = m.depth, m.width
    aw, nbytes = _addrw(depth), width // 8
    return "\n".join([
        f"// {depth} x {width} as flip-flops ({m.note}); exact msh_sram behaviour",
        f"module {sram_module_name(depth, width)} (",
        "    input  wire             clk,",
        "    input  wire             we,",
        f"    input  wire [{aw - 1}:0]     waddr,",
        f"    input  wire [{width - 1}:0]    wdata,",
        f"    input  wire [{nbytes - 1}:0]     wstrb,",
        "    input  wire             re,",
        f"    input  wire [{aw - 1}:0]     raddr,",
        f"    output reg  [{width - 1}:0]    rdata",
        ");",
        f"    wire [{depth * width - 1}:0] words;       // word i is words[i*{width} +: {width}]",
        "    genvar i, b;",
        "    generate",
        f"        for (i = 0; i < {depth}; i = i + 1) begin : g_word",
        f"            reg [{width - 1}:0] q;",
        f"            wire sel = we && waddr == {aw}'(i);",
        f"            for (b = 0; b < {nbytes}; b = b + 1) begin : g_byte",
        "                always @(posedge clk)",
        "                    if (sel && wstrb[b]) q[8*b +: 8] <= wdata[8*b +: 8];",
        "            end",
        f"            assign words[i*{width} +: {width}] = q;",
        "        end",
        "    endgenerate",
        "    always @(posedge clk)",
        f"        if (re) rdata <= words[raddr*{width} +: {width}];",
        "endmodule", ""])


def sram_dispatch(shapes: list[tuple[int, int]]) -> str:
    """``msh_sram`` (SPEC section 5 ports) choosing the wrapper of its DEPTH x WIDTH."""
    L = ["// msh_sram of SPEC_NANO_KPU.md section 5 for place and route: one branch per shape the chip uses.",
         "// A shape without a branch instantiates a module that does not exist, so synthesis stops.",
         "module msh_sram #(",
         "    parameter integer DEPTH = 256,",
         "    parameter integer WIDTH = 128,",
         "    parameter integer ADDRW = $clog2(DEPTH)",
         ") (",
         "    input  wire               clk,",
         "    input  wire               we,",
         "    input  wire [ADDRW-1:0]   waddr,",
         "    input  wire [WIDTH-1:0]   wdata,",
         "    input  wire [WIDTH/8-1:0] wstrb,",
         "    input  wire               re,",
         "    input  wire [ADDRW-1:0]   raddr,",
         "    output wire [WIDTH-1:0]   rdata",
         ");",
         "    generate"]
    for i, (d, w) in enumerate(shapes):
        kw = "if" if i == 0 else "end else if"
        L += [f"        {kw} (DEPTH == {d} && WIDTH == {w}) begin : g_{d}x{w}",
              f"            {sram_module_name(d, w)} u_mem (.clk(clk), .we(we), .waddr(waddr), .wdata(wdata),",
              "                .wstrb(wstrb), .re(re), .raddr(raddr), .rdata(rdata));"]
    L += ["        end else begin : g_unmapped",
          "            msh_sram_shape_not_mapped_by_flow_orfs u_unmapped ();",
          "        end",
          "    endgenerate",
          "endmodule", ""]
    return "\n".join(L)


# ---------------------------------------------------------------------------------------------- msh_rom

def read_hex(path: Path, depth: int, width: int) -> list[int]:
    """Words of a ``$readmemh`` file (``//`` and ``/* */`` comments, ``@addr``); every word must be present."""
    text = re.sub(r"/\*.*?\*/", " ", path.read_text(), flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    words: dict[int, int] = {}
    addr = 0
    for tok in text.split():
        if tok.startswith("@"):
            addr = int(tok[1:], 16)
            continue
        try:
            v = int(tok.replace("_", ""), 16)
        except ValueError:
            raise OrfsError(f"{path}: {tok!r} is not a hex word (x/z digits are not allowed in a ROM)") from None
        if addr >= depth:
            raise OrfsError(f"{path}: word at address {addr} is beyond DEPTH={depth}")
        if v >= 1 << width:
            raise OrfsError(f"{path}: word {tok} at address {addr} does not fit WIDTH={width}")
        words[addr] = v
        addr += 1
    missing = [a for a in range(depth) if a not in words]
    if missing:
        raise OrfsError(f"{path}: {len(missing)} of {depth} words missing (first at address {missing[0]}); "
                        "a ROM mapped to logic needs every word")
    return [words[a] for a in range(depth)]


def resolve_init_file(init_file: str, rtl_dir: Path) -> Path:
    """INIT_FILE names ``rtl/roms/<x>.hex`` (SPEC section 5): relative to the RTL folder's parent, or the folder itself."""
    p = Path(init_file)
    cands = [p] if p.is_absolute() else [rtl_dir.parent / p, rtl_dir / p]
    if not p.is_absolute() and p.parts[:1] == ("rtl",):
        cands.append(rtl_dir / Path(*p.parts[1:]))
    for c in cands:
        if c.is_file():
            return c.resolve()
    raise OrfsError(f"ROM file {init_file!r} not found; looked at {[str(c) for c in cands]}. "
                    "Write the tables first (python -m nano_k3.luts -o <rtl>/roms).")


@dataclass(frozen=True)
class Rom:
    depth: int
    width: int
    init_file: str        # as the RTL names it (the dispatch key)
    source: Path
    words: tuple[int, ...]

    @property
    def module(self) -> str:
        stem = re.sub(r"\W", "_", self.source.stem)
        return f"msh_rom_{stem}_{self.depth}x{self.width}"


def rom_module(rom: Rom) -> str:
    aw, w = _addrw(rom.depth), rom.width
    digits = max(1, (w + 3) // 4)
    L = [f"// {rom.depth} x {w} constant table from {rom.init_file} as logic (fakeram45 has no ROM)",
         f"module {rom.module} (",
         f"    input  wire [{aw - 1}:0] raddr1, output wire [{w - 1}:0] rdata1,",
         f"    input  wire [{aw - 1}:0] raddr2, output wire [{w - 1}:0] rdata2",
         ");",
         f"    function [{w - 1}:0] lookup(input [{aw - 1}:0] rom_addr);",
         "        case (rom_addr)"]
    L += [f"            {aw}'d{a}: lookup = {w}'h{v:0{digits}x};" for a, v in enumerate(rom.words)]
    L += [f"            default: lookup = {w}'h0;   // addresses >= DEPTH (the simulation model reads X)",
          "        endcase",
          "    endfunction",
          "    assign rdata1 = lookup(raddr1);",
          "    assign rdata2 = lookup(raddr2);",
          "endmodule", ""]
    return "\n".join(L)


def rom_memory_bits(depth: int, width: int) -> int:
    """Bits of the memory ORFS's Yosys makes of a ROM table: ``proc_rom`` turns the case statement over all
    2**ADDRW addresses (its default arm answers those >= DEPTH) into a 2**ADDRW x WIDTH ``$mem``; ``opt_mem``
    may then drop constant bit lanes, never add any (513 x 24 became 1024 x 23)."""
    return (1 << _addrw(depth)) * width


def synth_memory_max_bits(roms: list[Rom]) -> tuple[int, Rom] | None:
    """(SYNTH_MEMORY_MAX_BITS, the table that sets it): the largest ROM table's memory, or None when ORFS's
    default already holds every table (config.mk then leaves the variable out)."""
    if not roms:
        return None
    bits, rom = max(((rom_memory_bits(r.depth, r.width), r) for r in roms), key=lambda x: (x[0], x[1].module))
    return (bits, rom) if bits > ORFS_SYNTH_MEMORY_MAX_BITS else None


def rom_dispatch(roms: list[Rom]) -> str:
    L = ["// msh_rom of SPEC_NANO_KPU.md section 5 for place and route: one branch per table (shape + INIT_FILE).",
         "module msh_rom #(",
         "    parameter integer DEPTH = 256,",
         "    parameter integer WIDTH = 16,",
         "    parameter integer ADDRW = $clog2(DEPTH),",
         '    parameter         INIT_FILE = ""',
         ") (",
         "    input  wire [ADDRW-1:0] raddr1,",
         "    output wire [WIDTH-1:0] rdata1,",
         "    input  wire [ADDRW-1:0] raddr2,",
         "    output wire [WIDTH-1:0] rdata2",
         ");",
         "    generate"]
    for i, r in enumerate(roms):
        kw = "if" if i == 0 else "end else if"
        L += [f'        {kw} (DEPTH == {r.depth} && WIDTH == {r.width} && INIT_FILE == "{r.init_file}") '
              f"begin : g_{r.module[len('msh_rom_'):]}",
              f"            {r.module} u_rom (.raddr1(raddr1), .rdata1(rdata1), .raddr2(raddr2), .rdata2(rdata2));"]
    L += ["        end else begin : g_unmapped",
          "            msh_rom_table_not_mapped_by_flow_orfs u_unmapped ();",
          "        end",
          "    endgenerate",
          "endmodule", ""]
    return "\n".join(L)


# ---------------------------------------------------------------------------------------------- storage

@dataclass(frozen=True)
class Storage:
    """A design's storage as the ORFS design implements it: each instance's mapping (flow/macro_map.py) and
    the ROM tables, one per shape + INIT_FILE."""
    mappings: tuple[Mapping, ...]
    roms: tuple[Rom, ...]

    @property
    def srams(self) -> list[Mapping]:
        return [m for m in self.mappings if m.impl == "macros"]

    @property
    def flops(self) -> list[Mapping]:
        return [m for m in self.mappings if m.impl == "flops"]

    @property
    def shapes(self) -> list[tuple[int, int]]:
        return sorted({(m.depth, m.width) for m in self.srams + self.flops})

    @property
    def fakerams(self) -> list[str]:
        return sorted({m.macro.name for m in self.srams})

    def verilog(self) -> str:
        """``msh_macros.v``: the msh_sram dispatch and one wrapper or flip-flop array per shape, the msh_rom
        dispatch and one case table per ROM."""
        by_shape = {(m.depth, m.width): m for m in self.srams + self.flops}
        shapes = self.shapes
        return "\n".join([
            "// generated by flow/orfs.py: storage macros of SPEC_NANO_KPU.md section 5 for the ORFS flow.",
            "// " + SRAM_WRAPPER_NOTE.replace("\n", "\n// "), "",
            *([sram_dispatch(shapes)] if shapes else []),
            *[(sram_flops if by_shape[s].impl == "flops" else sram_wrapper)(by_shape[s]) for s in shapes],
            *([rom_dispatch(list(self.roms))] if self.roms else []), *[rom_module(r) for r in self.roms]])


def design_storage(instances: list[dict], rtl_dir: Path, lib: StorageLib) -> Storage:
    """The Storage of ``instances`` (synth.json's ``macros.instances``: path, type, depth, width, and a ROM's
    init_file, resolved against the RTL folder ``rtl_dir``). A MacroMapError names an unmappable instance."""
    mappings = tuple(map_design(instances, lib))
    roms: dict[tuple, Rom] = {}
    for inst in instances:
        if inst["type"] != "msh_rom":
            continue
        key = (inst["depth"], inst["width"], inst.get("init_file", ""))
        if key not in roms:
            src = resolve_init_file(key[2], rtl_dir)
            roms[key] = Rom(key[0], key[1], key[2], src, tuple(read_hex(src, key[0], key[1])))
    names = [r.module for r in roms.values()]
    if len(set(names)) != len(names):
        raise OrfsError(f"two ROM tables would share a module name: {names}")
    return Storage(mappings, tuple(roms.values()))
