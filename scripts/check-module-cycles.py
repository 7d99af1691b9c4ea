#!/usr/bin/env python3
"""Checks that the top-level modules of each crate import each other in one direction only.

For every crate under `crates/` (and the facade in `src/`), each `.rs` file belongs to one
top-level module (`src/ops/unary.rs` belongs to `ops`, `src/op.rs` to `op`). Every `crate::`
path in a file (in `use` items and in expressions, tests included) is an edge from the file's
module to the module it names; a name the crate root re-exports (`crate::Tensor`) is resolved
to the module it comes from. The script prints every cycle among the top-level modules and
exits 1 when there is one; `--graph` prints the edges with the files that make them.

Usage: scripts/check-module-cycles.py [--graph] [CRATE_SRC_DIR ...]
"""

import os
import re
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def strip_comments(text):
    """Removes comments and string literals so that paths in them do not count."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    out = []
    for line in text.splitlines():
        # Drop string literals first (a `//` inside a string is not a comment).
        line = re.sub(r'"(?:\\.|[^"\\])*"', '""', line)
        i = line.find("//")
        if i >= 0:
            line = line[:i]
        out.append(line)
    return "\n".join(out)


def expand_use_tree(tree):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e']."""
    tree = re.sub(r"\s+", "", tree)
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
                results.append(prefix + part.split(" as ")[0])

    walk("", tree)
    return results


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
                paths.append(prefix + p)
        else:
            rest = re.match(r"[A-Za-z0-9_]*", text[m.end() :]).group(0)
            paths.append(prefix + rest)
    return paths


def root_reexports(lib_text):
    """Names the crate root re-exports, mapped to the top-level module they come from."""
    names = {}
    for m in re.finditer(r"\bpub\s+use\s+([^;]+);", lib_text):
        for p in expand_use_tree(m.group(1)):
            p = p.removeprefix("crate::").removeprefix("self::")
            segs = p.split("::")
            if len(segs) >= 2:
                alias = re.search(r"\bas\s+(\w+)", m.group(1))
                names[segs[-1]] = segs[0]
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
                target = head if head in modules else reexports.get(head)
                if target and target != here and target in modules:
                    edges[(here, target)].add(os.path.relpath(path, ROOT))
    return edges, modules


def cycles(edges, modules):
    """Strongly connected components with more than one module (Tarjan)."""
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

    for v in sorted(modules):
        if v not in index:
            strong(v)
    return out


def main(argv):
    show_graph = "--graph" in argv
    dirs = [a for a in argv if not a.startswith("--")]
    if not dirs:
        dirs = [os.path.join(ROOT, "src")]
        crates = os.path.join(ROOT, "crates")
        for c in sorted(os.listdir(crates)):
            dirs.append(os.path.join(crates, c, "src"))
    failed = False
    for src in dirs:
        edges, modules = analyse(src)
        name = os.path.relpath(src, ROOT)
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
    if failed:
        print("module cycles found: make the arrows point one way (see docs/ARCHITECTURE.md)")
        return 1
    print(f"no import cycles among top-level modules ({len(dirs)} crates checked)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
