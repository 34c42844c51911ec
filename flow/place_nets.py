"""The nets the global placer sees: logical nets, through synthesis' buffer chains.

ABC buffers every net above 16 sinks into a chain of buffers (flow/synth.py), and the net repair after
global placement (flow/repair.py) removes those buffers and builds new trees where the sinks landed. Given
to the placer as they come from synthesis, the chains are springs: a pipeline enable with 85,000 sinks is
a chain of thousands of 17-pin nets that ties groups of registers to a snake of buffers across the
region, and the logic between those registers is stretched along it (on the nano chip the MAC array's
multipliers spread over 800 um of one row, with the worst path crossing it nine times).

So the placer is given the *logical* net instead: the driver and every sink reached through plain
buffers (the buffers' own pins left out), and like any net it is ignored above ``MAX_PLACE_FANOUT``
pins. The chains' buffers keep their cells (their area counts in the spread) but no nets; the repair
deletes them. A buffer that drives an I/O pin is kept as a net of its own, as the repair keeps it.
"""
from __future__ import annotations

from flow.place_flat import MAX_PLACE_FANOUT
from flow.place_netlist import Design
from flow.repair import REMOVABLE


def placement_nets(d: Design, through_buffers: bool = True) -> tuple[list[list[tuple]], int]:
    """(the pin lists the placer is given, how many nets it ignores for their size): ``d.net_pins`` with
    plain-buffer chains merged into their logical nets when ``through_buffers``, else as they are."""
    if not through_buffers:
        kept = [pins for pins in d.net_pins if len(pins) <= MAX_PLACE_FANOUT]
        return kept, len(d.net_pins) - len(kept)
    is_buf = [bool(REMOVABLE.match(m)) for m in d.comp_master[:d.n_std]]
    n_std = d.n_std
    in_net, out_net, port_nets = {}, {}, set()
    for k, pins in enumerate(d.net_pins):
        for p in pins:
            obj = p[0]
            if obj < 0:
                port_nets.add(k)
            elif obj < n_std and is_buf[obj]:
                (out_net if p[5] else in_net)[obj] = k
    parent = list(range(len(d.net_pins)))

    def find(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    merged = set()
    for obj, z in out_net.items():
        a = in_net.get(obj)
        if a is None or z in port_nets:
            continue
        merged.add(obj)
        parent[find(z)] = find(a)
    members: dict[int, list[int]] = {}
    for k in range(len(d.net_pins)):
        members.setdefault(find(k), []).append(k)
    nets, ignored = [], 0
    for ks in members.values():
        if len(ks) == 1:
            pins = d.net_pins[ks[0]]
        else:
            pins = [p for k in ks for p in d.net_pins[k] if p[0] < 0 or p[0] not in merged]
        if len(pins) > MAX_PLACE_FANOUT:
            ignored += 1
        elif len(pins) >= 2:
            nets.append(pins)
    return nets, ignored
