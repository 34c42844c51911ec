"""The loader: the header's registers and checks, and the load phase of the control FSM (header,
descriptor table and tensor block read through the memory engine, then the wait for the ROM check).

Descriptors: record r's store beat goes to ``desc<r % DESC_BANKS>_sram`` row r // DESC_BANKS, so one cycle
reads an op's three records (hw/chip_dispatch.py prefetches them). A header that fails a check
(``HDR_CHECKS``, in order) ends the run with ``STATUS_BAD | (index + 1)``, a ROM whose checksum differs
with ``STATUS_BAD_ROM | k``. These functions add their logic to the chip core's module.
"""
from __future__ import annotations

import functools
import operator
from types import SimpleNamespace

from amaranth.hdl import Cat, Module, Mux, Signal

from hw.mac_array import EMB_RECORDS, emb_table_bytes
from hw.params import log2
from hw.weight_store import BEAT_BYTES
from nano_k3.config import GROUP_SIZES
from nano_k3.image import (DESC_BYTES, FORMAT_VERSION, HEADER_BYTES, HEADER_CFG_WORDS, HEADER_USED_WORDS,
                            HEADER_WORD, MAGIC, STATUS_BYTES, logits_stride)

DESC_BANKS = 4             # descriptor SRAM banks (an op reads three consecutive records at once)
CMD_RUN = 0x00000001
STATUS_BAD = 0xBAD00000
ADDR_BITS = 36
STATUS_BAD_ROM = STATUS_BAD | 0x80        # | the failing ROM's index: a ROM's checksum did not match
# Header checks in order; the status word of a rejected header is STATUS_BAD | (index + 1).
HDR_CHECKS = ("magic", "version", "dims", "group", "seq_len", "positions", "align", "order", "tensor_size",
              "descriptors")
ADDRESS_WORDS = ("desc_addr", "tokens_addr", "logits_addr", "argmax_addr", "status_addr", "scratch_addr")


def header_checks(m: Module, ctx) -> None:
    """The used header words ``ctx.hdr``, by name ``ctx.h`` (``nano_k3.image.HEADER_WORD``), the first
    failing check ``ctx.fail_code`` (0: none), ``ctx.status_ok`` (the status address is usable), the run's
    ``ctx.seq_len`` and ``ctx.group_log2``."""
    cfg, nrec, mp = ctx.cfg, ctx.nrec, ctx.mp
    hdr = [Signal(32, name=f"hdr{k}") for k in range(HEADER_USED_WORDS)]
    h = SimpleNamespace(**{name: hdr[k] for name, k in HEADER_WORD.items()})
    # the words the build fixes: the model's dimensions but the group size, the record count, the row stride
    expect = {**{f: getattr(cfg, f) for f in HEADER_CFG_WORDS.values() if f != "group_size"},
              "layer_bitmap": cfg.layer_bitmap, "n_records": nrec, "logits_stride": logits_stride(cfg)}
    mem_end = Signal(ADDR_BITS + 1)
    m.d.comb += mem_end.eq(h.scratch_addr + h.scratch_size)
    A = lambda v: v.as_unsigned()     # noqa: E731
    # Scratch must start right after the status block: memory ends at scratch + size (SPEC §3), so a
    # scratch address past the real memory is only visible as a gap after the status block.
    checks = {
        "magic": h.magic == MAGIC,
        "version": h.version == FORMAT_VERSION,
        "dims": Cat(*[getattr(h, f) == v for f, v in expect.items()]).all(),
        "group": functools.reduce(operator.or_, [h.group_size == g for g in GROUP_SIZES]),
        "seq_len": (h.seq_len >= 1) & (h.seq_len <= cfg.max_seq),
        "positions": h.positions == h.seq_len,
        "align": Cat(*[getattr(h, f)[:4] == 0 for f in ADDRESS_WORDS]).all(),
        "order": ((h.desc_addr >= HEADER_BYTES) & (A(h.desc_addr) + DESC_BYTES * A(h.n_records) <= h.tokens_addr)
                  & (A(h.tokens_addr) + 4 * A(h.seq_len) <= h.logits_addr)
                  & (A(h.logits_addr) + logits_stride(cfg) * A(h.seq_len) <= h.argmax_addr)
                  & (A(h.argmax_addr) + 4 * A(h.seq_len) <= h.status_addr)
                  & (A(h.status_addr) + STATUS_BYTES == h.scratch_addr) & (mem_end < (1 << ADDR_BITS))),
        "tensor_size": (A(h.tokens_addr) - A(h.desc_addr) - DESC_BYTES * A(h.n_records)
                        <= BEAT_BYTES * mp.store.beats + emb_table_bytes(cfg)),
    }
    fail_code = Signal(8)
    for k, name in reversed(list(enumerate(HDR_CHECKS[:-1]))):
        with m.If(~checks[name]):
            m.d.comb += fail_code.eq(k + 1)
    status_ok = Signal()
    m.d.comb += status_ok.eq((h.status_addr[:4] == 0) & (h.status_addr >= HEADER_BYTES)
                             & (A(h.status_addr) + STATUS_BYTES <= mem_end) & (mem_end <= (1 << ADDR_BITS)))
    seq_len = h.seq_len
    group_log2 = Signal(4)
    m.d.comb += group_log2.eq(Mux(h.group_size == 64, 6, 7))
    vars(ctx).update(hdr=hdr, h=h, A=A, fail_code=fail_code, status_ok=status_ok, seq_len=seq_len,
                     group_log2=group_log2)


def load_states(m: Module, ctx) -> None:
    """The control FSM from IDLE to the first position: RUN starts the ROM check; the header, the
    descriptor table (into the descriptor banks, checked) and the tensor block (into the weight store)."""
    core, h, A, hdr, fail_code, cnt, mem = ctx.core, ctx.h, ctx.A, ctx.hdr, ctx.fail_code, ctx.cnt, ctx.mem
    rd, load_rx, bad_desc, desc, first_addr = ctx.rd, ctx.load_rx, ctx.bad_desc, ctx.desc, ctx.first_addr
    emb_addr, tensor_base, mp, fetch0, mac = ctx.emb_addr, ctx.tensor_base, ctx.mp, ctx.fetch0, ctx.mac
    rom_check, pos, row_addr, pc, status_word = ctx.rom_check, ctx.pos, ctx.row_addr, ctx.pc, ctx.status_word
    with m.State("IDLE"):
        m.d.comb += core.cmd.ready.eq(1)
        with m.If(core.cmd.valid & (core.cmd.payload == CMD_RUN)):
            m.d.comb += rom_check.start.eq(1)          # the ROM check runs beside the load phase
            m.next = "HDR_REQ"
    with m.State("HDR_REQ"):
        m.d.sync += core.cycles_load.eq(core.cycles_load + 1)
        m.d.comb += [rd.valid.eq(1), rd.payload.addr.eq(0), rd.payload.length.eq(HEADER_BYTES)]
        with m.If(rd.ready):
            m.d.sync += cnt.eq(0)
            m.next = "HDR_WAIT"
    with m.State("HDR_WAIT"):
        m.d.sync += core.cycles_load.eq(core.cycles_load + 1)
        m.d.comb += load_rx.eq(1)
        with m.If(mem.o.valid):
            for k in range(-(-HEADER_USED_WORDS // 4)):
                with m.If(cnt == k):
                    m.d.sync += [hdr[4 * k + j].eq(mem.o.payload.data.word_select(j, 32))
                                 for j in range(min(4, HEADER_USED_WORDS - 4 * k))]
            m.d.sync += cnt.eq(cnt + 1)
            with m.If(mem.o.payload.last):
                m.next = "HDR_CHECK"
    with m.State("HDR_CHECK"):
        m.d.sync += core.cycles_load.eq(core.cycles_load + 1)
        with m.If(fail_code != 0):
            m.d.sync += status_word.eq(STATUS_BAD | fail_code)
            m.next = "ERR"
        with m.Else():
            m.next = "DESC_REQ"
    with m.State("DESC_REQ"):
        m.d.sync += core.cycles_load.eq(core.cycles_load + 1)
        m.d.comb += [rd.valid.eq(1), rd.payload.addr.eq(h.desc_addr), rd.payload.length.eq(h.n_records << log2(DESC_BYTES))]
        with m.If(rd.ready):
            m.d.sync += [cnt.eq(0), bad_desc.eq(0)]
            m.next = "DESC_WAIT"
    with m.State("DESC_WAIT"):
        m.d.sync += core.cycles_load.eq(core.cycles_load + 1)
        m.d.comb += load_rx.eq(1)
        with m.If(mem.o.valid):
            a = mem.o.payload.data[32:64]
            NE = len(EMB_RECORDS)
            rel = Signal(ADDR_BITS, name="desc_rel")       # store beat offset (records NE.. only)
            m.d.comb += rel.eq(a - Mux(cnt == NE, a, tensor_base))
            for b, bank in enumerate(desc):
                m.d.comb += [bank.w_en.eq(cnt[:log2(DESC_BANKS)] == b), bank.w_addr.eq(cnt >> log2(DESC_BANKS)),
                             bank.w_data.eq(rel >> 4), bank.w_strb.eq(-1)]
            with m.If(cnt == 0):
                m.d.sync += first_addr.eq(a)
            for k in range(NE):
                with m.If(cnt == k):
                    m.d.sync += emb_addr[k].eq(a)
            with m.If(cnt == NE):
                m.d.sync += tensor_base.eq(a)
            with m.If((a[:4] != 0) | (a < Mux(cnt == 0, a, first_addr)) | (a >= h.tokens_addr)
                      | ((cnt > NE) & (a < tensor_base))
                      | ((cnt == 0) & (A(h.desc_addr) + DESC_BYTES * A(h.n_records) > a))):
                m.d.sync += bad_desc.eq(1)
            m.d.sync += cnt.eq(cnt + 1)
            with m.If(mem.o.payload.last):
                m.next = "DESC_CHECK"
    with m.State("DESC_CHECK"):
        m.d.sync += core.cycles_load.eq(core.cycles_load + 1)
        with m.If(bad_desc | (A(h.tokens_addr) - tensor_base > BEAT_BYTES * mp.store.beats)):
            m.d.sync += status_word.eq(STATUS_BAD | len(HDR_CHECKS))
            m.next = "ERR"
        with m.Else():
            m.next = "TENS_REQ"
    with m.State("TENS_REQ"):
        m.d.sync += core.cycles_load.eq(core.cycles_load + 1)
        m.d.comb += [rd.valid.eq(1), rd.payload.addr.eq(tensor_base), rd.payload.length.eq(h.tokens_addr - tensor_base)]
        with m.If(rd.ready):
            m.d.sync += [cnt.eq(0), fetch0.eq(1)]
            m.next = "TENS_WAIT"
    with m.State("TENS_WAIT"):
        m.d.sync += core.cycles_load.eq(core.cycles_load + 1)
        m.d.comb += [load_rx.eq(1), mac.w.valid.eq(mem.o.valid), mac.w.payload.beat.eq(cnt),
                     mac.w.payload.data.eq(mem.o.payload.data)]
        with m.If(mem.o.valid):
            m.d.sync += cnt.eq(cnt + 1)
            with m.If(mem.o.payload.last):
                m.next = "ROM_WAIT"
    with m.State("ROM_WAIT"):           # position 0's token and row arrive meanwhile (EMB waits for them)
        m.d.sync += core.cycles_load.eq(core.cycles_load + 1)
        with m.If(rom_check.done):
            with m.If(rom_check.ok):
                m.d.sync += [pos.eq(0), row_addr.eq(h.logits_addr), pc.eq(0)]
                m.next = "FETCH"
            with m.Else():
                m.d.sync += status_word.eq(STATUS_BAD_ROM | rom_check.failed)
                m.next = "ERR"
