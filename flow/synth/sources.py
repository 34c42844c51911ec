"""The Verilog each part reads: the modules reachable from the part's top, and the port interfaces of its
black boxes, cut out of the design's source.

A part's Yosys run then depends on exactly this text (with the options and scripts), so it is also what the
part's cache digest covers (flow/synth/cache.py): editing one engine's module changes only the sources of
the parts that contain it. Yosys numbers its internal objects in reading order, so a part that read the
whole design would name (and, through ABC's input order, map) its cells differently when another part's
module changed; reading only its own modules makes a part's netlist a function of its own text.

The split relies on the source being plain Verilog modules, as Yosys writes it (rtl_gen's output): one
``module ... endmodule`` after another, with only comments and attributes between them. A source with
preprocessor directives, anything else between modules, a module defined twice, or a module that the plan
knows but the text does not (a derived ``$paramod``) is not split: every part then reads all files and is
keyed by all of their text.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from flow.synth.partition import Part
from flow.synth.spec import MACROS

_MODULE = re.compile(r"^(?:[ \t]*\(\*[^\n]*?\*\)[ \t]*\n)*[ \t]*module\s+(?P<name>\\\S+|[A-Za-z_][\w$]*)"
                     r"(?P<body>.*?)^[ \t]*endmodule\b[^\n]*\n?", re.M | re.S)
COMMENTS = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
# Directives that carry state across modules or files (the defines of the file list are in the digest).
_DIRECTIVE = re.compile(r"`(define|undef|undefineall|include|ifdef|ifndef|elsif|else|endif|timescale|"
                        r"default_nettype|resetall|line|celldefine|endcelldefine|pragma|begin_keywords|"
                        r"end_keywords|unconnected_drive|nounconnected_drive)\b")
_PRAGMA = re.compile(r"\b(synopsys|synthesis|translate_o(n|ff))\b")
_TOKEN = re.compile(r"\\\S+|[A-Za-z_][\w$]*")
_PORT_DECL = re.compile(r"^[ \t]*(?:input|output|inout|parameter|localparam)\b[^;]*;", re.M)
_SUBROUTINE = re.compile(r"^[ \t]*(function|task)\b.*?^[ \t]*end\1\b", re.M | re.S)


def _name(token: str) -> str:
    return token[1:] if token.startswith("\\") else token


@dataclass(frozen=True)
class Module:
    name: str          # as Yosys' plan names it (an escaped identifier without its backslash)
    text: str          # `module ... endmodule`, with the attributes before it
    refs: frozenset[str]       # names of other modules its text mentions (a superset of its instances)
    interface: str     # the module as a black box: its header and port / parameter declarations


@dataclass(frozen=True)
class Source:
    """The design's Verilog split by module (``modules`` in source order), or None where it cannot be
    split (``why`` says what stopped it); ``files_sha256`` digests every file's text either way."""
    modules: dict[str, Module] | None
    why: str
    files_sha256: str


def module_texts(text: str) -> dict[str, str]:
    """Module name (without the escape) -> its ``module ... endmodule`` text, for Verilog as Yosys writes it."""
    return {_name(m.group("name")): m.group(0) for m in _MODULE.finditer(text)}


def _interface(name_token: str, body: str) -> str:
    """A black-box stub: the header up to its first `;` and the port and parameter declarations of the body
    (functions and tasks removed: their `input`s are not ports)."""
    head, _, rest = body.partition(";")
    decls = _PORT_DECL.findall(_SUBROUTINE.sub("", rest))
    return f"module {name_token}{head};\n" + "".join(d.strip() + "\n" for d in decls) + "endmodule\n"


def _split_file(text: str, where: Path) -> tuple[list[tuple[str, str, str]], str]:
    """(token, text, body) per module of one file, or a reason why the file is not a list of modules."""
    found, pos = [], 0
    for m in _MODULE.finditer(text):
        gap = text[pos:m.start()]
        if COMMENTS.sub("", gap).strip():
            return [], f"{where}: text between modules: {COMMENTS.sub('', gap).strip()[:60]!r}"
        if _PRAGMA.search(gap):
            return [], f"{where}: a synthesis pragma between modules"
        found.append((m.group("name"), m.group(0), m.group("body")))
        pos = m.end()
    if COMMENTS.sub("", text[pos:]).strip():
        return [], f"{where}: text after the last module"
    return found, ""


def read_source(files: list[Path], include_dirs: list[Path]) -> Source:
    h = hashlib.sha256()
    texts = []
    for f in files:
        raw = f.read_bytes()
        h.update(hashlib.sha256(raw).digest())
        texts.append((f, raw.decode("utf-8", errors="surrogateescape")))
    for d in include_dirs:                 # what an `include could read
        for f in sorted(p for p in d.rglob("*") if p.is_file()):
            h.update(f"{f.relative_to(d)}\0".encode() + hashlib.sha256(f.read_bytes()).digest())
    digest = h.hexdigest()
    split: dict[str, tuple[str, str, str]] = {}
    for f, text in texts:
        if m := _DIRECTIVE.search(text):
            return Source(None, f"{f}: preprocessor directive {m.group(0)}", digest)
        found, why = _split_file(text, f)
        if why:
            return Source(None, why, digest)
        for token, mtext, body in found:
            if _name(token) in split:
                return Source(None, f"{f}: module {_name(token)} defined twice", digest)
            if _name(token) not in MACROS:          # replaced by the SPEC's stubs in every part
                split[_name(token)] = (token, mtext, body)
    modules = {}
    for name, (token, mtext, body) in split.items():
        refs = {_name(t) for t in _TOKEN.findall(body)} & split.keys() - {name}
        modules[name] = Module(name, mtext, frozenset(refs), _interface(token, body))
    return Source(modules, "", digest)


def _reach(edges: dict[str, frozenset[str] | list[str]], top: str, stop: set[str]) -> set[str]:
    seen, todo = set(), [top]
    while todo:
        x = todo.pop()
        if x not in seen and x not in stop:
            seen.add(x)
            todo += edges.get(x, ())
    return seen


def part_source(source: Source, part: Part, plan: dict[str, dict]) -> str | None:
    """The Verilog ``part`` reads: its reachable modules in source order, then its black boxes' interfaces;
    None when the part must read all files (the source is not split, or the plan reaches a module that the
    text does not: a derived module, or a reference the token scan missed)."""
    if source.modules is None:
        return None
    stop = set(part.blackbox)
    reached = _reach({m.name: m.refs for m in source.modules.values()}, part.top, stop)
    planned = _reach({m: p["subs"] for m, p in plan.items()}, part.top, stop)
    if part.top not in source.modules or not planned <= reached or any(b not in source.modules for b in stop):
        return None
    body = [m.text for m in source.modules.values() if m.name in reached]
    stubs = [source.modules[b].interface for b in part.blackbox]
    return "".join(t if t.endswith("\n") else t + "\n" for t in body) + "".join(stubs)
