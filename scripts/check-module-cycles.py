#!/usr/bin/env python3
"""Checks that the modules of each crate import each other in one direction only.

Two checks run for every crate under `crates/` (and the facade in `src/`):

Top-level modules. Each `.rs` file belongs to one top-level module (`src/ops/unary.rs`
belongs to `ops`, `src/op.rs` to `op`). Every `crate::` path in a file (in `use` items and in
expressions, tests included) is an edge from the file's module to the module it names; a name
the crate root re-exports (`crate::Tensor`) is resolved to the module it comes from. Every
cycle among the top-level modules fails the check.

Files. Every `.rs` file is a node. The module tree is read from the crate roots (`lib.rs`,
`main.rs`, `bin/*.rs`) through their `mod` declarations, `#[path = ...]` honoured, so
`src/a/b.rs` and `src/a/b/mod.rs` are the module `a::b`; an inline module (`mod tests { ... }`)
belongs to its file. Every path a file uses, in `use` items and in expressions, is resolved:
`crate::...`, `super::...` and `self::...` relative to the module (inline ones included) where
the path is written, and bare paths whose first segment is a child module of that module
(`mod foo;` then `use foo::X`). A path goes to the file defining its longest module prefix;
when the next segment is a name that module imports (`pub use`, or a plain `use` its
descendants can name) the import is followed to the module the name comes from (a few hops,
globs included), and a name imported from another crate makes no edge. Comments and string
literals do not count. Edges that do not count: a file's edges to the files of its own
ancestor modules (`ops/index/gather.rs` to `ops/index/mod.rs`, `ops/mod.rs` or `lib.rs`; so
a `#[cfg(test)] mod tests;` file may use its parent freely), and a `mod child;` declaration
itself (declaring a child is not importing it; a parent that uses its child is an edge).
Every strongly connected component of more than one file fails the check, unless it is on
the allow-list below (`ALLOWED_FILE_CYCLES`), each entry with the reason it is one concept.

The script prints each cycle, with the edges inside it and the paths (and lines) that make
each edge, and exits 1 when there is one. `--graph` prints the top-level edges with the files
that make them; `--files` prints every counted file edge with the paths that make it.

Usage: scripts/check-module-cycles.py [--graph] [--files] [CRATE_SRC_DIR ...]
"""

import os
import re
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# File cycles that are one concept, each with why (paths from the repository root).
ALLOWED_FILE_CYCLES = [
    # One concept: recording a view is recording an op.
    {"crates/strata-core/src/autograd/record.rs", "crates/strata-core/src/autograd/view.rs"},
]

# How many imports a path is followed through before it stops at the module it reached.
MAX_HOPS = 8


def strip_comments(text):
    """Blanks comments and the contents of string and char literals so that paths in them do
    not count. The result has the text's length and line breaks, so positions still match."""
    out = list(text)
    n, i = len(text), 0

    def blank(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(i, j)
            i = j
        elif c in "rb" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            # Raw strings (r"..", r#".."#, br".."), byte strings and byte chars.
            m = re.compile(r'b?r(#*)"').match(text, i)
            if m:
                end = text.find('"' + m.group(1), m.end())
                end = n if end < 0 else end
                blank(m.end(), end)
                i = end + 1 + len(m.group(1))
            else:
                i += 1  # a name, or the `b` of a byte string or char read next
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            blank(i + 1, min(j, n))
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{1F600}'), or a lifetime ('a).
            if i + 1 < n and text[i + 1] == "\\":
                j = text.find("'", i + 2)
                j = n if j < 0 else j
                blank(i + 1, j)
                i = j + 1
            elif i + 2 < n and text[i + 2] == "'":
                blank(i + 1, i + 2)
                i += 3
            else:
                i += 1
        else:
            i += 1
    return "".join(out)


def expand_use_tree(tree):
    """`a::{b, c::{d, e as f}}` -> ['a::b', 'a::c::d', 'a::c::e as f']."""
    tree = re.sub(r"\s*(::|[{},])\s*", r"\1", tree.strip())
    tree = re.sub(r"\s+", " ", tree)
    results = []

    def walk(prefix, s):
        depth, start, parts = 0, 0, []
        for i, ch in enumerate(s):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(s[start:i])
                start = i + 1
        parts.append(s[start:])
        for part in parts:
            if not part:
                continue
            brace = part.find("{")
            if brace >= 0 and part.endswith("}"):
                walk(prefix + part[:brace], part[brace + 1 : -1])
            else:
                results.append(prefix + part)

    walk("", tree)
    return results


def split_alias(path):
    """'a::b as c' -> ('a::b', 'c'); 'a::b' -> ('a::b', None)."""
    m = re.match(r"(.*?) as (\w+)$", path)
    return (m.group(1), m.group(2)) if m else (path, None)


# ---------------------------------------------------------------------------------------
# The top-level check.


def crate_paths(text):
    """Every `crate::...` path in the text, with use-trees expanded."""
    paths = []
    for m in re.finditer(r"\bcrate::((?:[A-Za-z0-9_]+::)*)(\{)?", text):
        prefix = m.group(1)
        if m.group(2):
            # A braced use-tree: find its matching brace.
            depth, i = 0, m.end(2) - 1
            while i < len(text):
                if text[i] == "{":
                    depth += 1
                elif text[i] == "}":
                    depth -= 1
                    if depth == 0:
                        break
                i += 1
            for p in expand_use_tree(text[m.end(2) : i]):
                paths.append(prefix + split_alias(p)[0])
        else:
            rest = re.match(r"[A-Za-z0-9_]*", text[m.end() :]).group(0)
            paths.append(prefix + rest)
    return paths


def root_reexports(lib_text):
    """Names the crate root re-exports, each mapped to the full path it comes from
    (`Tensor` -> ['tensor', 'Tensor'])."""
    names = {}
    for m in re.finditer(r"\bpub\s+use\s+([^;]+);", lib_text):
        for p in expand_use_tree(m.group(1)):
            p, alias = split_alias(p)
            p = p.removeprefix("crate::").removeprefix("self::")
            segs = p.split("::")
            if len(segs) >= 2 and segs[-1] not in ("*", "self"):
                names[alias or segs[-1]] = segs
    return names


def module_of(src, path):
    rel = os.path.relpath(path, src)
    first = rel.split(os.sep)[0]
    return first[:-3] if first.endswith(".rs") else first


def analyse(src):
    lib = os.path.join(src, "lib.rs")
    if not os.path.exists(lib):
        return {}, set()
    lib_text = strip_comments(open(lib, encoding="utf-8").read())
    modules = set(re.findall(r"^\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+(\w+)\s*;", lib_text, re.M))
    reexports = root_reexports(lib_text)
    edges = defaultdict(set)  # (from, to) -> files
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(dirpath, f)
            here = module_of(src, path)
            if here not in modules:
                continue
            text = strip_comments(open(path, encoding="utf-8").read())
            for p in crate_paths(text):
                head = p.split("::")[0]
                target = head if head in modules else reexports.get(head, [None])[0]
                if target and target != here and target in modules:
                    edges[(here, target)].add(os.path.relpath(path, ROOT))
    return edges, modules


def cycles(edges, nodes):
    """Strongly connected components with more than one node (Tarjan)."""
    graph = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(nodes) + 1000))
    for v in sorted(nodes):
        if v not in index:
            strong(v)
    return out


# ---------------------------------------------------------------------------------------
# The file check.

MOD_DECL = re.compile(
    r"((?:#\s*\[[^\]]*\]\s*)*)(?:\bpub\s*(?:\([^)]*\))?\s*)?\bmod\s+(\w+)\s*([;{])"
)
USE_ITEM = re.compile(r"(?:^|(?<=[;{}\]]))\s*(?:pub\s*(?:\([^)]*\))?\s*)?use\s+([^;]+);", re.M)
EXPR_PATH = re.compile(r"(?<![\w:])(\w+(?:\s*::\s*\w+)+)")
DEFINITION = re.compile(
    r"\b(?:fn|struct|enum|trait|type|const(?!\s+fn\b)|static(?:\s+mut)?|union|mod)\s+(\w+)"
    r"|\bmacro_rules!\s*(\w+)"
)


class SourceFile:
    """One `.rs` file: its text without comments and strings, and its inline modules."""

    def __init__(self, path):
        self.path = path
        self.raw = open(path, encoding="utf-8").read()
        self.text = strip_comments(self.raw)
        self.inline = []  # (body start, body end, chain of inline module names)
        self.decls = []  # (name, chain of inline modules it is in, #[path] value or None)
        self._scan(0, len(self.text), ())

    def _scan(self, start, end, chain):
        pos = start
        while True:
            m = MOD_DECL.search(self.text, pos, end)
            if not m:
                return
            attrs = self.raw[m.start(1) : m.end(1)]
            if m.group(3) == ";":
                p = re.search(r'#\s*\[\s*path\s*=\s*"([^"]*)"', attrs)
                self.decls.append((m.group(2), chain, p.group(1) if p else None))
                pos = m.end()
            else:
                close = matching_brace(self.text, m.end() - 1)
                inner = chain + (m.group(2),)
                self.inline.append((m.end(), close, inner))
                self._scan(m.end(), close, inner)
                pos = close + 1

    def chain_at(self, pos):
        """The inline modules (outermost first) that enclose `pos`."""
        best = ()
        for a, b, chain in self.inline:
            if a <= pos < b and len(chain) > len(best):
                best = chain
        return best

    def line_of(self, pos):
        return self.text.count("\n", 0, pos) + 1


def matching_brace(text, open_at):
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return len(text)


class ModuleTree:
    """One crate's modules (from one root file), the names each imports or defines, and the
    paths each file uses."""

    def __init__(self, root_file, sources):
        self.sources = sources
        self.module_file = {}  # module path (tuple) -> file
        self.file_module = {}  # file -> module path
        self.missing = []  # (declaring file, module name) whose file does not exist
        self.walk(root_file, (), True)
        self.bindings = defaultdict(dict)  # module -> name -> absolute path, or None (extern)
        self.globs = defaultdict(list)  # module -> modules it glob-imports
        self.defined = defaultdict(set)  # module -> names of items defined in it
        self.uses = []  # (file, module where written, path as written, line)
        for f in self.file_module:
            self.read(f)

    def source(self, path):
        if path not in self.sources:
            self.sources[path] = SourceFile(path)
        return self.sources[path]

    def walk(self, path, module, mod_rs):
        if not os.path.exists(path) or path in self.file_module:
            return
        src = self.source(path)
        self.file_module[path] = module
        self.module_file[module] = path
        for _, _, chain in src.inline:
            self.module_file[module + chain] = path
        here = os.path.dirname(path)
        own_dir = here if mod_rs else os.path.join(here, os.path.basename(path)[:-3])
        for name, chain, attr in src.decls:
            if attr is not None:
                child = os.path.normpath(os.path.join(own_dir if chain else here, *chain, attr))
                child_mod_rs = True
            else:
                d = os.path.join(own_dir, *chain)
                child = os.path.join(d, name + ".rs")
                if not os.path.exists(child):
                    child = os.path.join(d, name, "mod.rs")
                child_mod_rs = os.path.basename(child) == "mod.rs"
            if not os.path.isfile(child):
                self.missing.append((path, name))
            self.walk(child, module + chain + (name,), child_mod_rs)

    def absolute(self, segs, where):
        """The path `segs` written in module `where`, from the crate root; None when it
        names another crate (or a local name the check does not follow)."""
        head = segs[0]
        if head == "crate":
            return tuple(segs[1:])
        if head == "super":
            n = 0
            while n < len(segs) and segs[n] == "super":
                n += 1
            return where[: len(where) - n] + tuple(segs[n:])
        if head == "self":
            return where + tuple(segs[1:])
        if where + (head,) in self.module_file:
            return where + tuple(segs)
        return None

    def read(self, path):
        src = self.source(path)
        module = self.file_module[path]
        text = list(src.text)
        for m in USE_ITEM.finditer(src.text):
            where = module + src.chain_at(m.start(1))
            for p in expand_use_tree(m.group(1)):
                p, alias = split_alias(p)
                segs = [s for s in p.split("::") if s]
                if not segs or p.startswith("::"):
                    continue
                target = self.absolute(segs, where)
                if segs[-1] == "*":
                    if target is not None:
                        self.globs[where].append(target[:-1])
                elif segs[-1] == "self":
                    segs = segs[:-1]
                    if target is not None:
                        target = target[:-1]
                    if segs:
                        self.bindings[where].setdefault(alias or segs[-1], target)
                else:
                    self.bindings[where].setdefault(alias or segs[-1], target)
                if target is not None:
                    shown = p.removesuffix("::self")
                    self.uses.append((path, where, shown, src.line_of(m.start(1))))
            for k in range(m.start(), m.end()):
                if text[k] != "\n":
                    text[k] = " "
        text = "".join(text)
        for m in EXPR_PATH.finditer(text):
            where = module + src.chain_at(m.start())
            p = re.sub(r"\s+", "", m.group(1))
            if self.absolute(p.split("::"), where) is not None:
                self.uses.append((path, where, p, src.line_of(m.start())))
        for m in DEFINITION.finditer(src.text):
            self.defined[module + src.chain_at(m.start())].add(m.group(1) or m.group(2))

    def locate(self, path, hops=0):
        """The file that defines what the absolute `path` names, following imports; None
        when the name comes from another crate."""
        k = len(path)
        while k > 0 and path[:k] not in self.module_file:
            k -= 1
        module, rest = path[:k], path[k:]
        if rest and rest[0] not in ("*", "self") and hops < MAX_HOPS:
            name = rest[0]
            if name in self.bindings[module]:
                target = self.bindings[module][name]
                if target is None:
                    return None
                if target != module + (name,):
                    return self.locate(target + rest[1:], hops + 1)
            elif name not in self.defined[module]:
                for g in self.globs[module]:
                    if name in self.defined[g] or name in self.bindings[g]:
                        return self.locate(g + rest, hops + 1)
        return self.module_file.get(module)

    def edges(self):
        """Counted edges: (from file, to file) -> [(path as written, line)]."""
        out = defaultdict(list)
        for path, where, p, line in self.uses:
            target = self.absolute([s for s in p.split("::") if s], where)
            to = self.locate(target) if target is not None else None
            if to is None or to == path:
                continue
            module = self.file_module[path]
            if any(self.module_file.get(module[:k]) == to for k in range(len(module))):
                continue  # an ancestor module's file
            if (p, line) not in out[(path, to)]:
                out[(path, to)].append((p, line))
        return out


def crate_roots(src):
    roots = [os.path.join(src, f) for f in ("lib.rs", "main.rs")]
    bins = os.path.join(src, "bin")
    if os.path.isdir(bins):
        for f in sorted(os.listdir(bins)):
            p = os.path.join(bins, f)
            roots.append(p if f.endswith(".rs") else os.path.join(p, "main.rs"))
    return [r for r in roots if os.path.isfile(r)]


def file_graph(src):
    """The counted file edges of every crate rooted in `src`, the files not reached from any
    root (not compiled, so not checked), and the `mod` declarations without a file."""
    sources, edges, reached, missing = {}, {}, set(), []
    for root in crate_roots(src):
        tree = ModuleTree(root, sources)
        reached |= set(tree.file_module)
        edges.update(tree.edges())
        missing += tree.missing
    unreached = []
    for dirpath, _, files in os.walk(src):
        for f in files:
            p = os.path.join(dirpath, f)
            if f.endswith(".rs") and p not in reached:
                unreached.append(p)
    return edges, reached, sorted(unreached), missing


def rel(path):
    return os.path.relpath(path, ROOT)


def show_paths(uses, limit=4):
    shown = ", ".join(f"{p} (line {line})" for p, line in uses[:limit])
    return shown + (f", ... {len(uses) - limit} more" if len(uses) > limit else "")


def main(argv):
    show_graph = "--graph" in argv
    show_files = "--files" in argv
    dirs = [a for a in argv if not a.startswith("--")]
    if not dirs:
        dirs = [os.path.join(ROOT, "src")]
        crates = os.path.join(ROOT, "crates")
        for c in sorted(os.listdir(crates)):
            dirs.append(os.path.join(crates, c, "src"))
    allowed = [frozenset(c) for c in ALLOWED_FILE_CYCLES]
    failed = False
    files_checked = 0
    for src in dirs:
        src = os.path.abspath(src)
        edges, modules = analyse(src)
        name = rel(src)
        if show_graph:
            for (a, b), files in sorted(edges.items()):
                print(f"{name}: {a} -> {b}  ({', '.join(sorted(files)[:3])}{' ...' if len(files) > 3 else ''})")
        for comp in cycles(edges, modules):
            failed = True
            print(f"{name}: import cycle among top-level modules: {', '.join(comp)}")
            members = set(comp)
            for (a, b), files in sorted(edges.items()):
                if a in members and b in members:
                    print(f"    {a} -> {b}: {', '.join(sorted(files))}")

        fedges, files, unreached, missing = file_graph(src)
        files_checked += len(files)
        for f, mod in missing:
            print(f"{rel(f)}: `mod {mod};` has no file (the crate does not build), not checked")
        if show_files:
            for (a, b), uses in sorted(fedges.items()):
                print(f"{rel(a)} -> {rel(b)}: {show_paths(uses)}")
            for f in unreached:
                print(f"{rel(f)}: in no module tree (not compiled), not checked")
        for comp in cycles(fedges, files):
            members = set(comp)
            if frozenset(rel(f) for f in comp) in allowed:
                continue
            failed = True
            print(f"{name}: import cycle among files:")
            for f in comp:
                print(f"    {rel(f)}")
            for (a, b), uses in sorted(fedges.items()):
                if a in members and b in members:
                    print(f"  {rel(a)} -> {rel(b)}: {show_paths(uses)}")
    if failed:
        print("module cycles found: make the arrows point one way (see docs/ARCHITECTURE.md)")
        return 1
    print(
        f"no import cycles among top-level modules or files "
        f"({len(dirs)} crates, {files_checked} files checked)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
