"""The counts issue 31's closing notes compare before and after, measured on a source tree.

    .venv/bin/python benchmarks/layer_counts.py [TREE] [--list]

Prints, for the shipped packages of TREE (default: this checkout):
- `lines`: lines of simulation/*.py, replication/runtime.py and replication/driver.py;
- `private`: attribute reads and writes `x._name` where x is not self, cls or super() (a
  reach into another object's or module's private state), in simulation/ and everywhere;
- `jsonl-lines`: json.loads of a line outside runformat/ (a hand-rolled line reader, of a run
  file or of a pipe's protocol: --list names each, a reader judges);
- `config-reads`: string-key reads of a config (the pattern of
  tests/harness/test_config_reads.py), in all and outside the parsers;
- `test-only modules`: shipped modules that no shipped module names but a test or benchmark
  does (whole files of scaffolding);
- `test-only`: functions and classes whose name no shipped module mentions outside its own
  definition but a test or benchmark does, and their lines (a name is matched as a word, so a
  common name counts as used: this undercounts). Registered classes (a decorator) and the
  methods of a standard-library ABC's implementation (the library calls them) are used.
Pure source reading: nothing is imported or run.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

PACKAGES = ("harness", "control", "nemesis", "workloads", "checkers", "simulation", "replication",
            "runformat")
CONFIG_READ = re.compile(r"""\b(config|cfg)(\[|\.get\()\s*["'][a-z_.]+["']""")
PARSERS = ("harness/config.py", "harness/campaign_spec.py", "runformat/run_config.py",
           "workloads/rdkafka.py")


def sources(root: Path, dirs: tuple[str, ...]) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text(encoding="utf-8")
            for d in dirs for p in sorted((root / d).rglob("*.py"))}


def private_reaches(tree: ast.AST) -> list[int]:
    """Lines of `x._name` with x not self/cls/super() (dunders excluded)."""
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            continue
        v = node.value
        if isinstance(v, ast.Name) and v.id in ("self", "cls"):
            continue
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "super":
            continue
        out.append(node.lineno)
    return out


def line_decodes(tree: ast.AST) -> list[int]:
    """Lines of json.loads(line) (its argument a name with "line" in it, or `raw`) and of
    map(json.loads, ...): a JSON line decoded by hand."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f, args = node.func, node.args
        if isinstance(f, ast.Name) and f.id == "map" and args and _is_json_loads(args[0]):
            out.append(node.lineno)
        elif (_is_json_loads(f) and args and isinstance(args[0], ast.Name)
              and ("line" in args[0].id or args[0].id == "raw")):
            out.append(node.lineno)
    return out


def _is_json_loads(f: ast.AST) -> bool:
    return (isinstance(f, ast.Attribute) and f.attr == "loads" and isinstance(f.value, ast.Name)
            and f.value.id == "json")


def definitions(tree: ast.AST) -> list[tuple[str, int, int, bool]]:
    """(name, first line, line count, used) of every function and class; used: decorated
    (registered), or a method of a class implementing a standard-library ABC (importlib.abc's
    Loader.exec_module: the library calls it)."""
    protocol = {id(m) for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
                and any(".abc." in f".{ast.unparse(b)}" for b in node.bases) for m in node.body}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name.startswith("__") and node.name.endswith("__"):
                continue
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            used = bool(node.decorator_list) or id(node) in protocol
            out.append((node.name, start, node.end_lineno - start + 1, used))
    return out


def test_only(prod: dict[str, str], others: dict[str, str]) -> list[tuple[str, str, int]]:
    """(file:line, name, lines) of definitions only tests and benchmarks mention."""
    words: dict[str, int] = {}
    for text in prod.values():
        for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text):
            words[w] = words.get(w, 0) + 1
    other_words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", "\n".join(others.values())))
    out = []
    for path, text in prod.items():
        for name, line, n, decorated in definitions(ast.parse(text)):
            own = len(re.findall(rf"\b{re.escape(name)}\b", _def_lines(text, line, name)))
            if decorated or name in ("main",) or words.get(name, 0) > own:
                continue
            if name in other_words:
                out.append((f"{path}:{line}", name, n))
    return out


def test_only_modules(prod: dict[str, str], others: dict[str, str]) -> list[tuple[str, int]]:
    """(path, lines) of shipped modules that no other shipped module names (by their dotted
    name, or `from package import module`) but a test or benchmark does. A program of its own
    (`__main__`) and a module its package imports by listing them (pkgutil) are used."""
    out = []
    for path, text in prod.items():
        parts = path[:-3].split("/")
        init = prod.get("/".join(parts[:-1]) + "/__init__.py", "")
        if (parts[-1] in ("__init__", "__main__") or '__name__ == "__main__"' in text
                or "iter_modules" in init):
            continue
        dotted, package, name = ".".join(parts), ".".join(parts[:-1]), parts[-1]
        named = re.compile(rf"\b{re.escape(dotted)}\b|from {re.escape(package)} import "
                           rf"(\(\s*)?([\w, \n]*\b)?{re.escape(name)}\b")
        if any(named.search(t) for p, t in prod.items() if p != path):
            continue
        if any(named.search(t) for t in others.values()):
            out.append((path, text.count("\n")))
    return out


def _def_lines(text: str, line: int, name: str) -> str:
    """The def or class line(s) that name `name` (its decorators and signature)."""
    lines = text.splitlines()
    for i in range(line - 1, min(line + 5, len(lines))):
        if re.search(rf"\b(def|class)\s+{re.escape(name)}\b", lines[i]):
            return lines[i]
    return ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tree", nargs="?", default=str(Path(__file__).resolve().parent.parent))
    ap.add_argument("--list", action="store_true", help="name every place counted")
    args = ap.parse_args()
    root = Path(args.tree).resolve()
    prod = sources(root, PACKAGES)
    others = sources(root, ("tests", "benchmarks"))
    trees = {p: ast.parse(t) for p, t in prod.items()}

    sim_lines = sum(t.count("\n") for p, t in prod.items() if p.startswith("simulation/"))
    rt = {p: prod[p].count("\n") for p in ("replication/runtime.py", "replication/driver.py")
          if p in prod}
    print(f"lines: simulation/ {sim_lines}, " + ", ".join(f"{p} {n}" for p, n in rt.items()))

    reaches = {p: private_reaches(t) for p, t in trees.items()}
    in_sim = sum(len(v) for p, v in reaches.items() if p.startswith("simulation/"))
    print(f"private: simulation/ {in_sim}, all packages {sum(map(len, reaches.values()))}")
    if args.list:
        for p, lines in reaches.items():
            for n in lines:
                print(f"  {p}:{n}: {prod[p].splitlines()[n - 1].strip()}")

    decodes = {p: line_decodes(t) for p, t in trees.items() if not p.startswith("runformat/")}
    print(f"jsonl-lines: {sum(map(len, decodes.values()))} json.loads of a line outside "
          "runformat/")
    if args.list:
        for p, lines in decodes.items():
            for n in lines:
                print(f"  {p}:{n}: {prod[p].splitlines()[n - 1].strip()}")

    reads = {p: [n for n, line in enumerate(t.splitlines(), 1) if CONFIG_READ.search(line)]
             for p, t in prod.items()}
    total = sum(map(len, reads.values()))
    outside = sum(len(v) for p, v in reads.items() if p not in PARSERS)
    print(f"config-reads: {total} in all, {outside} outside the parsers")

    modules = test_only_modules(prod, others)
    print(f"test-only modules: {len(modules)} files, {sum(n for _, n in modules)} lines")
    if args.list:
        for path, n in modules:
            print(f"  {path} ({n} lines)")
    only = test_only(prod, others)
    print(f"test-only: {len(only)} definitions, {sum(n for *_, n in only)} lines")
    if args.list:
        for where, name, n in only:
            print(f"  {where} {name} ({n} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
