"""Tests of the memory image (nano_k3.image, SPEC §4): layout by hand, encodings, round trips,
rejection of malformed images, every problem of an image collected, output filling. The CLI is
tests/test_image_cli.py."""
from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pytest

from nano_k3.config import NANO, TINY
from nano_k3.image import (
    WORD_PROMPT_LEN, ImageError, STATUS_DONE, build_image, check_image, name_hash, plan_layout, read_image, read_layout,
    read_outputs, record_specs, weight_bytes, write_image, write_outputs,
)
from nano_k3.weights import IntMat, generate, generate_tokens

SEED = 20260706


def nano_image(group=128, seq_len=16, seed=SEED):
    cfg = NANO.with_group(group)
    return build_image(generate(cfg, seed), generate_tokens(cfg, seed, seq_len))


def patched(data: bytes, addr: int, value: int) -> bytes:
    buf = bytearray(data)
    struct.pack_into("<I", buf, addr, value)
    return bytes(buf)


# --- hashes, header and addresses by hand ---------------------------------------------------

def test_name_hash_known_values():
    assert name_hash("") == 0x84222325            # low 32 bits of the FNV-1a-64 offset basis
    assert name_hash("a") == 0x8601EC8C           # FNV-1a-64("a") = 0xaf63dc4c8601ec8c
    assert name_hash("foobar") == 0xF73967E8      # FNV-1a-64("foobar") = 0x85944171f73967e8


def test_header_words_nano_g128_seq48():
    words = np.frombuffer(nano_image(128, 48).data[:256], "<u4")
    expected = {
        0: 0x4B444143, 1: 1, 2: 2, 3: 64, 4: 2, 5: 32, 6: 16, 7: 32, 8: 128, 9: 2, 10: 32, 11: 4,
        12: 8, 13: 2, 14: 1, 15: 32, 16: 2, 17: 512, 18: 64, 19: 48, 20: 128, 21: 2, 22: 246,
        23: 256,
        24: 139712,                 # SPEC §4.1 word 24
        25: 139712 + 48 * 4,        # = 139904: tokens are 192 B, already 16-aligned
        26: 139904 + 48 * 2048,     # = 238208
        27: 238208 + 48 * 4,        # = 238400
        28: 238400 + 16,            # = 238416
        29: 1 << 20,                # 8 * (kv 20480 + st 10496) = 247808 < 2^20
        30: 2048, 31: 48,
    }
    assert {i: int(words[i]) for i in expected} == expected
    assert not words[32:].any()


def test_descriptor_addresses_by_hand():
    # Table: 256 + 246 * 16 = 4192. emb.q = 512 * 32 B = 16384 -> emb.s at 20576 (1024 B = 512 int16)
    # -> emb.z at 21600 (512 B) -> L0.res_attn.norm.w at 22112, each 64-int16 param is 128 B:
    # res_attn.proj 22240, norm1.w 22368, kda.q.q 22496 (32 x 64 = 2048 B), kda.q.s 24544 (128 B),
    # kda.q.z 24672 (64 B), kda.k.q 24736; k and v triples are 2240 B each -> kda.b.q at 29216
    # (64 B), kda.b.s at 29280 (4 B, padded to 16), kda.b.z at 29296.
    hand = {"emb.q": 4192, "emb.s": 20576, "emb.z": 21600, "L0.res_attn.norm.w": 22112,
            "L0.res_attn.proj": 22240, "L0.norm1.w": 22368, "L0.kda.q.q": 22496, "L0.kda.q.s": 24544,
            "L0.kda.q.z": 24672, "L0.kda.k.q": 24736, "L0.kda.b.q": 29216, "L0.kda.b.s": 29280,
            "L0.kda.b.z": 29296}
    for group in (64, 128):  # identical up to mla.wk_c, the first tensor with fan_in 128
        layout = plan_layout(NANO.with_group(group), 48)
        assert {n: layout.descriptor(n).addr for n in hand} == hand
    g128, g64 = plan_layout(NANO.with_group(128), 48), plan_layout(NANO.with_group(64), 48)
    # mla.wk_c.s: (1, 64) int16 = 128 B at g128, (2, 64) = 256 B at g64; .z 64 B vs 128 B.
    assert (g128.descriptor("L1.mla.wk_c.s").length, g64.descriptor("L1.mla.wk_c.s").length) == (128, 256)
    assert g64.descriptor("L1.mla.wk_c.z").addr - g128.descriptor("L1.mla.wk_c.z").addr == 128
    assert g64.descriptor("L1.mla.wk_r.q").addr - g128.descriptor("L1.mla.wk_r.q").addr == 192
    # wv repeats the same growth: every later address moves by 384 B.
    assert g64.descriptor("L1.mla.o.q").addr - g128.descriptor("L1.mla.o.q").addr == 384
    assert (g128.tokens_addr, g64.tokens_addr) == (139712, 139712 + 384)
    # head.q is the 4th-last record: tokens - 16384 - 1024 - 512.
    assert g128.descriptor("head.q").addr == 139712 - 17920


def test_descriptor_table_contents():
    image = nano_image(128, 16)
    table = np.frombuffer(image.data, "<u4", count=246 * 4, offset=256).reshape(246, 4)  # (n, 4)
    names = [r.name for r in record_specs(NANO)]
    assert names[:3] == ["emb.q", "emb.s", "emb.z"] and names[-3:] == ["head.q", "head.s", "head.z"]
    assert [int(h) for h in table[:, 0]] == [name_hash(n) for n in names]
    aux = dict(zip(names, table[:, 3].tolist()))
    assert aux["emb.q"] == 64 and aux["L1.mla.wk_c.q"] == 128 and aux["L0.kda.f2.q"] == 32
    assert aux["L0.kda.f2.s"] == 0 and aux["L0.kda.A"] == 0
    assert all(a % 16 == 0 for a in table[:, 1])
    # Routed experts sit at a constant stride of 9 records.
    e0 = names.index("L0.moe.e0.g.q")
    assert names[e0 + 9 * 3] == "L0.moe.e3.g.q"


def test_weight_bytes():
    wb = weight_bytes(NANO)
    assert (wb.dense, wb.experts, wb.embedding, wb.total) == (62_250, 55_296, 17_920, 135_466)
    # 76,109 = dense + 2 layers * top-2 * 3456 B per expert + 35 B emb row (32 q + 2 s + 1 z).
    assert (wb.expert, wb.emb_row, wb.active_per_token) == (3456, 35, 76_109)
    assert weight_bytes(NANO.with_group(64)).active_per_token == 76_493


# --- tensor encodings -----------------------------------------------------------------------

def test_nibble_order_standard_tensor():
    cfg = NANO
    w = generate(cfg, 1)
    q = np.zeros((64, 64), np.uint8)
    q[0, 0], q[1, 0], q[2, 1], q[3, 5] = 0x3, 0xA, 0x7, 0xF
    w.mats["L0.kda.q"] = IntMat(q=q, s=w.mat("L0.kda.q").s, z=w.mat("L0.kda.q").z)
    image = build_image(w, generate_tokens(cfg, 1, 8))
    addr = image.layout.descriptor("L0.kda.q.q").addr
    raw = np.frombuffer(image.data, np.uint8, count=32 * 64, offset=addr).reshape(32, 64)  # (fan_in/2, fan_out)
    assert raw[0, 0] == 0xA3          # row 0 low nibble, row 1 high nibble
    assert raw[1, 1] == 0x07          # row 2 (even) in the low nibble of byte row 1
    assert raw[1, 5] == 0xF0          # row 3 (odd) in the high nibble
    assert raw.sum() == 0xA3 + 0x07 + 0xF0


def test_embedding_token_major():
    w = generate(NANO, 1)
    emb = w.mat("emb")
    image = build_image(w, generate_tokens(NANO, 1, 8))
    layout = image.layout
    t = 137
    row = np.frombuffer(image.data, np.uint8, count=32, offset=layout.descriptor("emb.q").addr + 32 * t)
    assert np.array_equal(row & 0xF, emb.q[t, 0::2]) and np.array_equal(row >> 4, emb.q[t, 1::2])
    s = np.frombuffer(image.data, "<i2", count=1, offset=layout.descriptor("emb.s").addr + 2 * t)
    z = image.data[layout.descriptor("emb.z").addr + t]
    assert s[0] == emb.s[t, 0] and z == emb.z[t, 0]


def test_scale_zero_and_param_bytes():
    w = generate(NANO.with_group(64), 2)
    image = build_image(w, generate_tokens(NANO, 2, 8))
    lay = image.layout
    wk_c = w.mat("L1.mla.wk_c")  # s/z (2, 64): group-major, output column fastest
    s = np.frombuffer(image.data, "<i2", count=128, offset=lay.descriptor("L1.mla.wk_c.s").addr)
    assert np.array_equal(s, wk_c.s.ravel()) and s[64] == wk_c.s[1, 0]
    conv = np.frombuffer(image.data, "<i2", count=256, offset=lay.descriptor("L0.kda.qconv").addr)
    assert conv[4 * 3 + 2] == w.param("L0.kda.qconv")[3, 2]  # channel-major, then tap
    a = np.frombuffer(image.data, "<u2", count=2, offset=lay.descriptor("L0.kda.A").addr)
    assert np.array_equal(a, w.param("L0.kda.A"))


# --- round trips ----------------------------------------------------------------------------

ROUND_TRIPS = [pytest.param(c.with_group(g), n, id=f"{c.name}-g{g}-s{n}")
               for c in (NANO, TINY) for g in (64, 128) for n in (8, c.max_seq)]


@pytest.mark.parametrize("cfg,seq_len", ROUND_TRIPS)
def test_write_read_round_trip(cfg, seq_len, tmp_path):
    weights, tokens = generate(cfg, SEED), generate_tokens(cfg, SEED, seq_len)
    image = write_image(tmp_path / "img.bin", weights, tokens)
    data = (tmp_path / "img.bin").read_bytes()
    assert data == image.data and len(data) == image.layout.size
    parsed = read_image(data)
    assert parsed.layout == plan_layout(parsed.cfg, seq_len)
    assert parsed.cfg.name == "image"
    assert parsed.cfg == dataclasses.replace(cfg, name="image")
    assert np.array_equal(parsed.tokens, tokens)
    for name, mat in weights.mats.items():  # every tensor kind: emb, standard, narrow, two-group
        got = parsed.weights.mat(name)
        for part in "qsz":
            assert np.array_equal(getattr(got, part), getattr(mat, part)), f"{name}.{part}"
            assert getattr(got, part).dtype == getattr(mat, part).dtype, f"{name}.{part}"
    for name, v in weights.params.items():  # norm, Q4.11 and unsigned Q8.8
        assert np.array_equal(parsed.weights.param(name), v) and parsed.weights.param(name).dtype == v.dtype, name
    out = parsed.outputs
    assert out.status == 0 and not out.logits.any() and not out.argmax.any()
    assert not np.frombuffer(data, np.uint8, offset=parsed.layout.scratch_addr).any()


def test_outputs_fill_and_read_back():
    image = nano_image(128, 8)
    rng = np.random.default_rng(5)
    logits = rng.integers(-2**31, 2**31, (8, 512), dtype=np.int64)  # (seq_len, vocab)
    logits[3, [7, 9]] = 2**31 - 1                                     # tie: lowest index wins
    filled = image.with_outputs(logits)
    out = read_outputs(filled.data)
    assert np.array_equal(out.logits, logits) and out.logits.dtype == np.int32
    assert out.argmax[3] == 7 and np.array_equal(out.argmax, np.argmax(logits, axis=1))
    assert out.status == STATUS_DONE
    # Row p sits at logits_addr + p * 2048; nothing outside the output regions changed.
    lay = image.layout
    assert struct.unpack_from("<i", filled.data, lay.logits_addr + 5 * 2048 + 4 * 11)[0] == logits[5, 11]
    assert filled.data[:lay.logits_addr] == image.data[:lay.logits_addr]
    explicit = write_outputs(image.data, logits, argmax=np.arange(8), status=0x1234)
    assert read_outputs(explicit).argmax.tolist() == list(range(8)) and read_outputs(explicit).status == 0x1234
    with pytest.raises(ValueError, match=r"logits shape \(8, 511\), expected"):
        write_outputs(image.data, logits[:, :511])


def test_build_rejects_bad_inputs():
    w = generate(NANO, 1)
    with pytest.raises(ValueError, match=r"ids in 0\.\.511.*range 0\.\.512"):
        build_image(w, np.array([0, 512]))
    bad = generate(NANO, 1)
    m = bad.mat("head")
    bad.mats["head"] = IntMat(q=m.q[:, :500], s=m.s, z=m.z)
    with pytest.raises(ValueError, match=r"head\.q: shape \(64, 500\), expected \(64, 512\)"):
        build_image(bad, np.array([1]))
    bad.mats["head"] = IntMat(q=m.q, s=m.s, z=m.z + 10)
    with pytest.raises(ValueError, match=r"head\.z: values .* outside 0\.\.15"):
        build_image(bad, np.array([1]))


# --- malformed images -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def good() -> bytes:
    return nano_image(128, 16).data


def _desc_word(i: int, field: int) -> int:
    """Byte address of descriptor i's field (0 hash, 1 addr, 2 length, 3 aux)."""
    return 256 + 16 * i + 4 * field


MALFORMED = {
    "bad-magic": (lambda d: patched(d, 0, 0x12345678), r"bad magic at word 0: 0x12345678"),
    "bad-version": (lambda d: patched(d, 4, 2), r"header word 1 \(format version\) = 2, expected 1"),
    "bad-group": (lambda d: patched(d, 4 * 20, 96), r"invalid model: group_size .* got 96"),
    "bad-bitmap": (lambda d: patched(d, 4 * 21, 0b110), r"word 21: layer bitmap 0x6"),
    "seq-len-too-big": (lambda d: patched(d, 4 * 19, 65), r"word 19: seq_len 65 outside 1\.\.64"),
    "seq-len-words-disagree": (lambda d: patched(d, 4 * 31, 15), r"header word 31 .* = 15, expected 16"),
    "bad-stride": (lambda d: patched(d, 4 * 30, 2032), r"header word 30 .* = 2032, expected 2048"),
    "huge-expert-count": (lambda d: patched(d, 4 * 12, 0xFFFFFFF), r"header word 12: 268435455 experts"),
    "descriptor-count": (lambda d: patched(d, 4 * 22, 245), r"header word 22 \(descriptor count.*\) = 245, expected 246"),
    "table-out-of-range": (lambda d: patched(d, 4 * 23, 0xFFFFF00), r"descriptor table \(word 23\): bytes .* outside"),
    "table-misaligned": (lambda d: patched(d, 4 * 23, 260), r"descriptor table \(word 23\): address 260 .* not 16-byte aligned"),
    "hash-mismatch": (lambda d: patched(d, _desc_word(7, 0), 0xDEADBEEF),
                      r"descriptor 7 \(L0\.kda\.q\.s\): name hash 0xdeadbeef does not match tensor 'L0\.kda\.q\.s'"),
    "length-mismatch": (lambda d: patched(d, _desc_word(0, 2), 16368), r"descriptor 0 \(emb\.q\): length 16368, expected 16384"),
    "aux-mismatch": (lambda d: patched(d, _desc_word(6, 3), 32), r"descriptor 6 \(L0\.kda\.q\.q\): aux 32, expected 64"),
    "tensor-out-of-range": (lambda d: patched(d, _desc_word(245, 1), 2**32 - 16), r"descriptor 245 \(head\.z\): bytes .* outside"),
    "tensor-misaligned": (lambda d: patched(d, _desc_word(3, 1), 22120), r"descriptor 3 .*: address 22120 .* not 16-byte aligned"),
    "tensor-overlap": (lambda d: patched(d, _desc_word(1, 1), 4192), r"descriptor 1 \(emb\.s\): address 4192 overlaps .* ends at 20576"),
    "logits-out-of-range": (lambda d: patched(d, 4 * 25, 2**31), r"logits region \(word 25\): bytes .* outside"),
    "status-misaligned": (lambda d: patched(d, 4 * 27, read_layout(d).status_addr + 8),
                          r"status block \(word 27\): address \d+ .* not 16-byte aligned"),
    "token-out-of-vocab": (lambda d: patched(d, 139712 + 4 * 3, 512), r"token array \(word 24\): position 3 holds id 512"),
    "truncated-header": (lambda d: d[:100], r"truncated file: 100 bytes"),
    "truncated-scratch": (lambda d: d[:-16], r"scratch \(word 28\): bytes .* outside the \d+-byte file"),
    "truncated-tensors": (lambda d: d[:50_000], r"descriptor \d+ \(.*\): bytes .* outside the 50000-byte file"),
}


@pytest.mark.parametrize("case", list(MALFORMED), ids=list(MALFORMED))
def test_malformed_rejected(good, case):
    mutate, message = MALFORMED[case]
    with pytest.raises(ImageError, match=message):
        read_image(mutate(good))


def test_image_error_is_value_error(good):
    assert issubclass(ImageError, ValueError)
    read_layout(good)  # the unmodified image parses
    assert read_image(good + bytes(32)).layout == read_layout(good)  # trailing bytes are tolerated


# --- every problem collected (check_image: what `python -m nano_k3.image validate` prints) ------

def test_check_good_image(good):
    check = check_image(good)
    assert check.ok and check.problems == () and check.layout == read_layout(good)
    assert len(check.rows) == 246 and all(r.readable and not r.problems for r in check.rows)
    assert [r.key for r in check.regions] == ["table", "tokens", "logits", "argmax", "status", "scratch"]


def test_check_collects_every_problem(good):
    bad = patched(patched(good, _desc_word(7, 0), 0xDEADBEEF), _desc_word(9, 3), 7)  # L0.kda.q.s hash, k.q aux
    check = check_image(bad)
    assert check.problems == (
        "descriptor 7 (L0.kda.q.s): name hash 0xdeadbeef does not match tensor 'L0.kda.q.s' (expected 0x7300e63f)",
        "descriptor 9 (L0.kda.k.q): aux 7, expected 64",
    )
    assert check.layout is None and check.rows[7].problems == (check.problems[0].split(": ", 1)[1],)
    with pytest.raises(ImageError, match=r"descriptor 7 .*0xdeadbeef.* \(and 1 more: python -m nano_k3.image "
                                         r"validate FILE lists them\)"):
        read_layout(bad)


def test_check_truncated_is_one_problem_and_a_count(good):
    check = check_image(good[:50_000])
    first, rest = check.problems
    assert first == "descriptor 73 (L0.moe.e2.g.q): bytes 49024..50048 lie outside the 50000-byte file"
    assert rest == ("177 more regions, descriptor 74 (L0.moe.e2.g.s) to scratch (word 28), lie outside the "
                    f"50000-byte file too: the file is truncated (its header makes the image {len(good)} bytes)")
    assert sum(not r.readable for r in check.rows) == 246 - 73 and check.rows[72].readable


def test_check_values(good):
    layout = read_layout(good)
    z = layout.descriptor("L0.kda.q.z").addr
    bad = bytearray(good)
    bad[z + 5] = bad[z + 9] = 16                              # zero points are 0..15 (SPEC §4.3)
    bad = patched(bytes(bad), layout.argmax_addr + 8, 512)    # argmax ids are below vocab (§4.5)
    assert check_image(bad).problems == (
        "descriptor 8 (L0.kda.q.z): zero point 16 at element 5 is outside 0..15 (2 such elements)",
        "argmax region (word 26): position 2 holds id 512, vocab is 512",
    )
    with pytest.raises(ImageError, match=r"zero point 16 at element 5"):  # inputs: read_image refuses them
        read_image(bad)
    assert read_layout(bad) == layout                                     # the layout itself is sound
    assert check_image(bad, outputs=False).problems[1:] == ()             # argmax: only with outputs


def test_check_reserved_header_words(good):
    check = check_image(patched(patched(good, 4 * 40, 3), 4 * 63, 1))
    assert check.problems == ("header words 33..63 must be 0; word 40 = 0x3 and 1 more are not",)


def test_generate_mode_header_word(good):
    """Word 32 (extension, issue 19): the prompt length; 0 in every SPEC image, at most seq_len."""
    assert read_layout(good).prompt_len == 0 and not read_layout(good).generates
    seq_len = read_layout(good).seq_len
    gen = patched(good, 4 * WORD_PROMPT_LEN, 3)
    assert check_image(gen).ok and read_layout(gen).prompt_len == 3 and read_layout(gen).generates
    assert check_image(patched(good, 4 * WORD_PROMPT_LEN, seq_len + 1)).problems == (
        f"header word 32: prompt length {seq_len + 1} (generate mode) exceeds seq_len {seq_len}",)
    w = generate(TINY, SEED)
    built = build_image(w, np.array([5, 6, 0, 0], dtype=np.uint32), prompt_len=2)
    assert read_layout(built.data).prompt_len == 2
    with pytest.raises(ValueError, match="prompt_len must be in 0..seq_len=4"):
        build_image(w, np.array([5, 6, 0, 0], dtype=np.uint32), prompt_len=5)
