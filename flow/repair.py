"""Placement-aware rebuilding of high-fanout buffer trees (OpenROAD's ``repair_design``, simplified).

ABC buffers every net above its fanout limit (flow/synth.py, ``buffer -p -N 16``) without knowing where the
sinks will be: a pipeline enable with thousands of loads becomes a chain of buffers, each a few sinks
short of the last, and once the sinks spread over the die every stage drives a die-wide wire (0.5 - 1 ns
per stage at the slow corner). After global placement, this step, per net:

1. takes the *logical* net: the driver (a cell that is not a plain buffer, or an input port) and every
   sink reached through plain buffers (``BUF_X*`` / ``CLKBUF_X*``); the buffers are removed. A buffer
   that drives an output port stays (the port keeps its driver) and counts as a sink;
2. when it has more than ``MAX_FANOUT`` sinks, builds a new tree bottom-up: the sinks are split by
   location (median cuts across the longer side of their box) into clusters of at most ``MAX_FANOUT``
   sinks spanning at most ``MAX_CLUSTER_SPAN_UM``; each cluster gets a buffer at its centroid. The
   buffers are clustered the same way (without the span limit) until the driver is left with at most
   ``MAX_FANOUT`` buffers whose input capacitance is at most ``ROOT_LOAD_FF`` (else one more level);
3. sizes each new buffer by its load (pin capacitances from the liberty plus the estimated wire):
   the smallest ``BUF_Xn`` with load <= ``LOAD_PER_DRIVE_FF`` x n.

The clock port's net and nets that reach a flip-flop or latch clock pin are left alone (the clock is
ideal). Only buffers are removed and inserted, so the logic is unchanged; ``verify`` checks that every
rewired pin reaches the driver it had before through buffers only, and that no removed buffer's net
is still read. The result is a flat netlist (``write_verilog``) that the DEF, SPEF and STA all use.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from pdk_config.nangate45 import DONT_USE

MAX_FANOUT = 12                 # sinks per new buffer, and new buffers per driver
MAX_CLUSTER_SPAN_UM = 60.0      # half-perimeter of a leaf cluster's box
LOAD_PER_DRIVE_FF = 10.0        # a BUF_Xn is given at most n x this much load
ROOT_LOAD_FF = 20.0             # the original driver keeps at most this much buffer input capacitance
DEFAULT_PIN_CAP_FF = 2.0        # a pin the liberty does not describe (macro pins)
BUFFERS = tuple(f"BUF_X{n}" for n in (1, 2, 4, 8, 16, 32))
REMOVABLE = re.compile(r"^(CLK)?BUF_X\d+$")
CLOCK_PINS = frozenset({"CK", "G", "GN"})      # Nangate45 flip-flop and latch clock pins
PORT_SINK = ("<output port>", "", 0)          # a tree leaf standing for the net's output port


class RepairError(RuntimeError):
    """The repair would change the logic or could not run; the message says where."""


# ---------------------------------------------------------------------------------------------- liberty

def pin_values(liberty_text: str, direction: str, attribute: str) -> dict[tuple[str, str], float]:
    """(cell, pin) -> the number ``attribute`` of every ``direction`` pin of a liberty that states one."""
    out = {}
    cells = list(re.finditer(r'\bcell\s*\(\s*"?([\w$]+)"?\s*\)\s*\{', liberty_text))
    for k, m in enumerate(cells):
        body = liberty_text[m.end(): cells[k + 1].start() if k + 1 < len(cells) else len(liberty_text)]
        pins = list(re.finditer(r'\bpin\s*\(\s*"?(\w+)"?\s*\)\s*\{', body))
        for j, p in enumerate(pins):
            pin_body = body[p.end(): pins[j + 1].start() if j + 1 < len(pins) else len(body)]
            d = re.search(r"\bdirection\s*:\s*(\w+)", pin_body)
            c = re.search(rf"\b{attribute}\s*:\s*([0-9.eE+-]+)", pin_body)
            if d and d.group(1) == direction and c:
                out[(m.group(1), p.group(1))] = float(c.group(1))
    return out


def input_caps(liberty_text: str) -> dict[tuple[str, str], float]:
    """(cell, pin) -> input capacitance (fF, the library's unit) of every input pin of a liberty."""
    return pin_values(liberty_text, "input", "capacitance")


# ---------------------------------------------------------------------------------------------- netlist view

@dataclass
class _Netlist:
    """Driver and sinks per bit of a flat Yosys JSON module."""
    cells: dict
    driver: dict = field(default_factory=dict)      # bit -> cell key, or None for an input port
    sinks: dict = field(default_factory=dict)       # bit -> [(cell key, pin, index)]
    port_bits: set = field(default_factory=set)
    keep: frozenset = frozenset()                   # buffers that stay (sinks of the net they read)

    @classmethod
    def of(cls, module: dict, keep: frozenset[str] = frozenset()) -> "_Netlist":
        n = cls(module["cells"], keep=keep)
        for key, c in n.cells.items():
            dirs = c.get("port_directions", {})
            for pin, bits in c["connections"].items():
                for j, b in enumerate(bits):
                    if not isinstance(b, int):
                        continue
                    if dirs.get(pin) == "output":
                        n.driver[b] = key
                    else:
                        n.sinks.setdefault(b, []).append((key, pin, j))
        for port in module["ports"].values():
            for b in port["bits"]:
                if isinstance(b, int):
                    n.port_bits.add(b)
                    if port["direction"] == "input":
                        n.driver[b] = None
        return n

    def is_buffer(self, key: str) -> bool:
        """A removable buffer: plain BUF/CLKBUF whose output is not a port, and not one to keep."""
        c = self.cells[key]
        if key in self.keep or not REMOVABLE.match(c["type"]):
            return False
        a, z = c["connections"].get("A", [None]), c["connections"].get("Z", [None])
        return isinstance(a[0], int) and isinstance(z[0], int) and z[0] not in self.port_bits

    def tree(self, root: int) -> tuple[list[tuple[str, str, int]], list[str]]:
        """(sink pins, buffers) of the logical net driven onto bit ``root``."""
        leaves, bufs, stack = [], [], [root]
        while stack:
            b = stack.pop()
            for key, pin, j in self.sinks.get(b, ()):
                if self.is_buffer(key):
                    bufs.append(key)
                    stack.append(self.cells[key]["connections"]["Z"][0])
                else:
                    leaves.append((key, pin, j))
        return leaves, bufs

    def source(self, bit: int) -> int:
        """The bit a chain of plain buffers starts from (a kept buffer starts one)."""
        while True:
            key = self.driver.get(bit)
            if key is None or key in self.keep or not REMOVABLE.match(self.cells[key]["type"]):
                return bit
            bit = self.cells[key]["connections"]["A"][0]


def _driver_xy(cell: dict, key: str, bit: int, cell_xy: dict) -> tuple[float, float] | None:
    """Where the output pin of cell ``key`` that drives ``bit`` lies: its own position for a macro whose
    pins lie apart (an msh_sram's tiles), else the cell's centre."""
    for pin, bits in cell["connections"].items():
        if cell.get("port_directions", {}).get(pin) == "output" and bit in bits:
            pos = cell_xy.get((key, pin, bits.index(bit)))
            if pos is not None:
                return pos
    return cell_xy.get(key)


def _move_output(cell: dict, old: int, new: int) -> None:
    """The output pin bit of ``cell`` on bit ``old`` drives bit ``new`` instead."""
    for pin, bits in cell["connections"].items():
        if cell.get("port_directions", {}).get(pin) == "output" and old in bits:
            bits[bits.index(old)] = new
            return
    raise RepairError(f"{cell['type']} drives no output bit {old}")


# ---------------------------------------------------------------------------------------------- tree building

@dataclass
class _Node:
    x: float
    y: float
    cap: float
    sink: tuple | None = None          # a leaf: (cell key, pin, index)
    children: list = field(default_factory=list)
    master: str = ""


def _split(nodes: list[_Node], max_n: int, max_span: float | None) -> list[list[_Node]]:
    """Clusters of at most ``max_n`` nodes (and at most ``max_span`` um half-perimeter), by median cuts."""
    out, todo = [], [nodes]
    while todo:
        group = todo.pop()
        xs, ys = [n.x for n in group], [n.y for n in group]
        w, h = max(xs) - min(xs), max(ys) - min(ys)
        if len(group) <= max_n and (max_span is None or w + h <= max_span or len(group) == 1):
            out.append(group)
            continue
        group = sorted(group, key=(lambda n: n.x) if w >= h else (lambda n: n.y))
        k = -(-len(group) // max_n)                      # clusters needed by count
        cut = len(group) // 2 if k < 2 else (k // 2) * len(group) // k
        cut = min(max(cut, 1), len(group) - 1)
        todo += [group[:cut], group[cut:]]
    return out


class TreeBuilder:
    def __init__(self, caps: dict[tuple[str, str], float], c_per_um: float, steiner):
        self.caps, self.c_per_um, self.steiner = caps, c_per_um, steiner
        self.buffers = [b for b in BUFFERS if b not in DONT_USE and (b, "A") in caps]
        if not self.buffers:
            raise RepairError(f"the liberty describes none of the buffers {BUFFERS}")

    def _buffer(self, children: list[_Node]) -> _Node:
        x = sum(n.x for n in children) / len(children)
        y = sum(n.y for n in children) / len(children)
        xs, ys = [n.x for n in children] + [x], [n.y for n in children] + [y]
        wire = (max(xs) - min(xs) + max(ys) - min(ys)) * self.steiner(len(children) + 1) * self.c_per_um
        load = wire + sum(n.cap for n in children)
        master = next((b for b in self.buffers if load <= LOAD_PER_DRIVE_FF * int(b.rsplit("X", 1)[1])),
                      self.buffers[-1])
        return _Node(x, y, self.caps[(master, "A")], children=children, master=master)

    def repeaters(self, x: float, y: float, nodes: list[_Node], spacing: float) -> list[_Node]:
        """``nodes`` as driven from (x, y), each that lies ``spacing`` um or more away behind a chain of
        buffers along the L-shaped route (x first), one every ``spacing`` um; the same below every buffer."""
        out = []
        for n in nodes:
            if n.children:
                n.children = self.repeaters(n.x, n.y, n.children, spacing)
            dx, dy = n.x - x, n.y - y
            steps = int((abs(dx) + abs(dy)) // spacing)
            node = n
            for k in range(steps, 0, -1):                  # from the far end back towards the driver
                t = k * spacing
                px, py = (x + t * (1 if dx > 0 else -1), y) if t <= abs(dx) else \
                    (x + dx, y + (t - abs(dx)) * (1 if dy > 0 else -1))
                node = self.buffer_at(px, py, [node])
            out.append(node)
        return out

    def load_at(self, x: float, y: float, children: list[_Node]) -> float:
        """What a gate at (x, y) drives into ``children``: a star of Manhattan wires and their input pins."""
        return sum(abs(n.x - x) + abs(n.y - y) for n in children) * self.c_per_um + sum(n.cap for n in children)

    def buffer_at(self, x: float, y: float, children: list[_Node]) -> _Node:
        """A buffer at (x, y) driving ``children``, sized for that load."""
        load = self.load_at(x, y, children)
        master = next((b for b in self.buffers if load <= LOAD_PER_DRIVE_FF * int(b.rsplit("X", 1)[1])),
                      self.buffers[-1])
        return _Node(x, y, self.caps[(master, "A")], children=children, master=master)

    def build(self, sinks: list[_Node]) -> list[_Node]:
        """The nodes the original driver is left with (each a buffer with its subtree)."""
        nodes = [self._buffer(g) for g in _split(sinks, MAX_FANOUT, MAX_CLUSTER_SPAN_UM)]
        while len(nodes) > MAX_FANOUT or (len(nodes) > 1 and sum(n.cap for n in nodes) > ROOT_LOAD_FF):
            groups = _split(nodes, MAX_FANOUT, None)
            if len(groups) == 1 and len(nodes) <= MAX_FANOUT:
                nodes = [self._buffer(nodes)]
            else:
                nodes = [self._buffer(g) for g in groups]
        return nodes


# ---------------------------------------------------------------------------------------------- repair

@dataclass
class RepairResult:
    nets_repaired: int = 0
    buffers_removed: int = 0
    buffers_added: int = 0
    area_removed_um2: float = 0.0
    area_added_um2: float = 0.0
    largest_fanout: int = 0
    added_by_size: dict = field(default_factory=dict)
    new_cells: dict = field(default_factory=dict)        # cell key -> (x, y) um, where it was put
    rewired: list = field(default_factory=list)          # (cell key, pin, index, source bit) to verify
    removed_bits: set = field(default_factory=set)
    moved: dict = field(default_factory=dict)            # output-port bit -> the bit its driver drives now

    def as_dict(self) -> dict:
        return {"nets_repaired": self.nets_repaired, "buffers_removed": self.buffers_removed,
                "buffers_added": self.buffers_added, "area_removed_um2": round(self.area_removed_um2, 3),
                "area_added_um2": round(self.area_added_um2, 3),
                "area_change_um2": round(self.area_added_um2 - self.area_removed_um2, 3),
                "largest_fanout": self.largest_fanout, "added_by_size": dict(sorted(self.added_by_size.items())),
                "max_fanout": MAX_FANOUT, "max_cluster_span_um": MAX_CLUSTER_SPAN_UM,
                "load_per_drive_ff": LOAD_PER_DRIVE_FF}


def repair(module: dict, cell_xy: dict, port_xy: dict[int, tuple[float, float]],
           caps: dict[tuple[str, str], float], areas: dict[str, float], c_per_um: float, steiner,
           clock_bits: set[int], progress=lambda msg: None, force: frozenset[int] = frozenset(),
           spacing_um: float | None = None, only_forced: bool = False,
           keep: frozenset[str] = frozenset(), drive_limit=None,
           buffer_first: frozenset[str] = frozenset()) -> RepairResult:
    """Rebuilds, in ``module`` (a flat Yosys JSON module, edited in place), every logical net with more than
    ``MAX_FANOUT`` sinks as a clustered buffer tree, and so the logical nets whose source bit is in
    ``force`` whatever their fanout. ``cell_xy``: placed centre of every cell (um), and where a cell's pins
    lie apart (the tiles of an ``msh_sram``) the position of each pin bit under the key (cell key, pin,
    bit); a sink without one (an instance outside the placement, such as an ``msh_rom``) is wired to the
    net's driver; ``port_xy``:
    position per port bit. ``spacing_um``: a rebuilt net's edges this long or longer get repeaters
    (``TreeBuilder.repeaters``), starting from the driver's position. ``only_forced``: rebuild the nets of
    ``force`` alone (the trees built at placement stay as they are). ``keep``: buffers (cell keys) that are
    not removed: a rebuilt net ends at them (sign-off's hold and load-isolation buffers).
    ``drive_limit(driver cell key or None for a port, bit)``: the driver's max capacitance (fF) or None; a
    rebuilt net whose first level (wires to its top buffers and their inputs) is more than that gets one
    more buffer, at the driver, in front of it (a weak gate such as NOR4_X1 may drive 10 fF). A rebuilt net
    driven by a cell in ``buffer_first`` (with ``drive_limit``) always gets that buffer: a macro's pin lies
    inside a macro field, where the first repeaters of the estimate cannot stay (re-legalisation moves them
    to the field's edge, and the macro would drive the wire to them)."""
    net = _Netlist.of(module, keep)
    builder = TreeBuilder(caps, c_per_um, steiner)
    res = RepairResult()
    next_bit = 1 + max([b for b in net.driver] + [b for b in net.sinks] + [1])
    taken = set(module["cells"])
    serial = 0
    out_ports = {b for p in module["ports"].values() if p["direction"] == "output" for b in p["bits"]
                 if isinstance(b, int) and net.driver.get(b) is not None}
    roots = sorted(b for b in set(net.sinks) | out_ports if b not in clock_bits and
                   (net.driver.get(b) is None or not net.is_buffer(net.driver[b])) and b in net.driver)
    force = {net.source(b) for b in force}
    progress(f"repair: {len(force):,} of {len(roots):,} driven nets to rebuild" if only_forced else
             f"repair: {len(roots):,} driven nets to examine")
    trees = []
    for root in roots:
        source = net.source(root)
        if only_forced and source not in force:
            continue                                # its tree stays: not walked (1.6M nets on the nano chip)
        leaves, bufs = net.tree(root)
        if (((len(leaves) > MAX_FANOUT and not only_forced) or source in force)
                and not any(pin in CLOCK_PINS for _, pin, _ in leaves)):
            trees.append((root, source, leaves, bufs))      # sources before anything is removed
    for root, source, leaves, bufs in trees:
        res.largest_fanout = max(res.largest_fanout, len(leaves))
        sinks, unplaced = [], []
        for key, pin, j in leaves:
            pos = cell_xy.get((key, pin, j)) or cell_xy.get(key)    # a macro pin's own tile, else the cell
            if pos is None:                         # no position (an msh_rom, mapped to logic elsewhere):
                unplaced.append((key, pin, j))     # it stays on the net's driver
                continue
            x, y = pos
            sinks.append(_Node(x, y, caps.get((net.cells[key]["type"], pin), DEFAULT_PIN_CAP_FF), sink=(key, pin, j)))
        drv = net.driver.get(root)
        at = port_xy.get(root) if drv is None else _driver_xy(net.cells[drv], drv, root, cell_xy)
        port = root in out_ports and at is not None and root in port_xy
        if port:                                # the port's wire is rebuilt too: a buffer drives the port bit
            sinks.append(_Node(*port_xy[root], DEFAULT_PIN_CAP_FF, sink=PORT_SINK))
        top = builder.build(sinks) if sinks else []
        if spacing_um and at is not None:
            top = builder.repeaters(at[0], at[1], top, spacing_um)
        if drive_limit is not None and at is not None and top:
            limit = drive_limit(drv, root)
            if drv in buffer_first or (limit is not None and builder.load_at(at[0], at[1], top) > limit):
                top = [builder.buffer_at(at[0], at[1], top)]
        if port:
            top = [builder.buffer_at(at[0], at[1], [n]) if n.sink == PORT_SINK else n for n in top]
            drive = next_bit                    # the driver's output moves to a new bit
            next_bit += 1
            _move_output(net.cells[drv], root, drive)
            module["netnames"][f"repair_drv_{drive}"] = {"hide_name": 0, "bits": [drive], "attributes": {}}
            res.moved[root] = drive
        else:
            drive = root
        top += [_Node(0.0, 0.0, 0.0, sink=leaf) for leaf in unplaced]
        for key in bufs:
            c = net.cells.pop(key)
            res.removed_bits.add(c["connections"]["Z"][0])
            res.area_removed_um2 += areas.get(c["type"], 0.0)
        res.buffers_removed += len(bufs)
        stack = [(n, drive) for n in top]
        while stack:
            node, parent = stack.pop()
            if node.sink == PORT_SINK:
                continue                        # its buffer drives the port bit itself
            if node.sink:
                key, pin, j = node.sink
                net.cells[key]["connections"][pin][j] = parent
                res.rewired.append((key, pin, j, source))
                continue
            while f"repair_buf_{serial}" in taken:
                serial += 1
            name = f"repair_buf_{serial}"
            serial += 1
            if any(ch.sink == PORT_SINK for ch in node.children):
                out_bit = root
            else:
                out_bit, next_bit = next_bit, next_bit + 1
            net.cells[name] = {"hide_name": 0, "type": node.master, "parameters": {}, "attributes": {},
                               "port_directions": {"A": "input", "Z": "output"},
                               "connections": {"A": [parent], "Z": [out_bit]}}
            if out_bit != root:
                module["netnames"][f"repair_net_{serial - 1}"] = {"hide_name": 0, "bits": [out_bit], "attributes": {}}
            res.new_cells[name] = (node.x, node.y)
            res.buffers_added += 1
            res.area_added_um2 += areas.get(node.master, 0.0)
            res.added_by_size[node.master] = res.added_by_size.get(node.master, 0) + 1
            stack += [(ch, out_bit) for ch in node.children]
        res.nets_repaired += 1
    progress(f"repair: {res.nets_repaired:,} nets rebuilt (largest fanout {res.largest_fanout:,}), "
             f"{res.buffers_removed:,} buffers removed, {res.buffers_added:,} added")
    return res


def verify(module: dict, res: RepairResult) -> None:
    """Buffers only: every rewired pin reaches its old driver through plain buffers, no removed buffer's
    output is still read, and every inserted buffer's output is read."""
    net = _Netlist.of(module)
    for key, pin, j, source in res.rewired:
        bit = net.cells[key]["connections"][pin][j]
        if net.source(bit) != res.moved.get(source, source):
            raise RepairError(f"{key}.{pin}[{j}] now reaches bit {net.source(bit)} through buffers, "
                              f"not bit {source} as before")
    for port_bit, drive in res.moved.items():
        if net.source(port_bit) != net.source(drive):
            raise RepairError(f"output port bit {port_bit} reaches bit {net.source(port_bit)} through buffers, "
                              f"not its driver's bit {drive}")
    dangling = sorted(b for b in res.removed_bits if net.sinks.get(b))
    if dangling:
        raise RepairError(f"the outputs of removed buffers are still read: bits {dangling[:10]}")
    unread = [k for k in res.new_cells if not net.sinks.get(net.cells[k]["connections"]["Z"][0])
              and net.cells[k]["connections"]["Z"][0] not in res.moved]
    if unread:
        raise RepairError(f"inserted buffers drive nothing: {unread[:10]}")


# ---------------------------------------------------------------------------------------------- netlist out

_PLAIN_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")


def verilog_id(name: str) -> str:
    return name if _PLAIN_ID.match(name) else f"\\{name} "


def write_verilog(f, module: dict, top: str, names: dict[int, str], instance_name, extra: str = "") -> None:
    """A flat structural netlist of ``module``. ``names``: net name per bit (port bits named ``port[i]``);
    ``instance_name(key, cell)``: the instance name (hierarchy joined by '/', escaped here); ``extra``:
    text appended after the module (the empty macro modules)."""
    ports = module["ports"]
    port_of: dict[int, str] = {}
    decl = []
    for pname, p in ports.items():
        w = len(p["bits"])
        decl.append(f"  {p['direction']} {'' if w == 1 else f'[{w - 1}:0] '}{verilog_id(pname)};")
    for pname, p in sorted(ports.items(), key=lambda kv: kv[1]["direction"] != "input"):
        for j, b in enumerate(p["bits"]):
            if isinstance(b, int):
                port_of.setdefault(b, names[b])

    def expr(b) -> str:
        if not isinstance(b, int):
            return {"0": "1'b0", "1": "1'b1"}.get(b, "1'bx")
        n = port_of.get(b)
        return n if n is not None else verilog_id(names[b])

    used = {b for c in module["cells"].values() for bits in c["connections"].values() for b in bits
            if isinstance(b, int) and b not in port_of}
    f.write(f"// flat netlist written by flow/repair.py\nmodule {verilog_id(top)} ({', '.join(verilog_id(p) for p in ports)});\n")
    f.write("\n".join(decl) + "\n")
    f.writelines(f"  wire {verilog_id(names[b])};\n" for b in sorted(used))
    for pname, p in ports.items():
        if p["direction"] == "input":
            continue
        for j, b in enumerate(p["bits"]):
            me = pname if len(p["bits"]) == 1 else f"{pname}[{j}]"
            if expr(b) != me:
                lhs = verilog_id(pname) if len(p["bits"]) == 1 else f"{verilog_id(pname).rstrip()}[{j}]"
                f.write(f"  assign {lhs} = {expr(b)};\n")
    for key, c in module["cells"].items():
        if c["type"].startswith("$"):             # $scopeinfo: hierarchy bookkeeping of `flatten`, no logic
            continue
        conns = []
        for pin, bits in c["connections"].items():
            e = expr(bits[0]) if len(bits) == 1 else "{" + ", ".join(expr(b) for b in reversed(bits)) + "}"
            conns.append(f".{pin}({e})")
        f.write(f"  {c['type']} {verilog_id(instance_name(key, c))} ({', '.join(conns)});\n")
    f.write("endmodule\n")
    if extra:
        f.write(extra)
