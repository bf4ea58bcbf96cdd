"""An AST mutator of our own: each mutant is one small change to one module's source.

Why not mutmut or cosmic-ray: both run a test command in-process or swap files in the working
tree; here a mutant is simulated in child processes (and Spark tasks) that must load the
mutated module while the checkout stays untouched, so all a mutant needs to be is its id.

A mutant's id is `PATH:OPERATOR:LINE:COL:INDEX` (PATH relative to the project root, LINE and
COL the AST node's position, INDEX which of the operator's alternatives): the same source
always yields the same ids, and `mutant(root, id)` rebuilds the mutant from its id alone.
The change is spliced into the source text at the node's position, so the rest of the file,
its comments and line numbers stay as they were and the diff shows just the change.

It imports nothing of the protocol (pyproject.toml's import-linter contract): the child
process builds the mutant before the mutated module is first imported."""

from __future__ import annotations

import ast
import difflib
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

# The safety-relevant protocol modules (docs/mutation.md says what each holds).
MODULES = (
    "replication/partition.py",
    "replication/controller.py",
    "replication/metadata.py",
    "replication/log.py",
    "replication/segment_log.py",
    "replication/broker.py",
    "replication/broker_store.py",
    "replication/client.py",
    "replication/driver.py",
)


@dataclass(frozen=True)
class Splice:
    """Replace bytes [start, end) of the source with `text`; `what` says it in words."""

    start: int
    end: int
    text: str
    what: str


@dataclass(frozen=True)
class Mutant:
    path: str
    operator: str
    line: int
    col: int
    index: int
    what: str
    original: str
    source: str

    @property
    def id(self) -> str:
        return f"{self.path}:{self.operator}:{self.line}:{self.col}:{self.index}"

    @property
    def module(self) -> str:
        """The dotted module name the mutated source stands in for."""
        return self.path.removesuffix(".py").replace("/", ".")

    def diff(self) -> str:
        return "".join(difflib.unified_diff(
            self.original.splitlines(keepends=True), self.source.splitlines(keepends=True),
            f"a/{self.path}", f"b/{self.path}", n=2))


class _Text:
    """The source as bytes, since the AST's columns count UTF-8 bytes, not characters."""

    def __init__(self, source: str) -> None:
        self.data = source.encode()
        self.starts = [0]
        for line in self.data.splitlines(keepends=True):
            self.starts.append(self.starts[-1] + len(line))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (self.starts[node.lineno - 1] + node.col_offset,
                self.starts[node.end_lineno - 1] + node.end_col_offset)

    def of(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.data[start:end].decode()

    def gap(self, left: ast.AST, right: ast.AST) -> tuple[int, str]:
        """Where the text between two sibling nodes starts, and that text (an operator)."""
        start, end = self.span(left)[1], self.span(right)[0]
        return start, self.data[start:end].decode()

    def splice(self, cut: Splice) -> str:
        return (self.data[:cut.start] + cut.text.encode() + self.data[cut.end:]).decode()


# ---- the operators: each maps a node to its alternatives (none when it does not apply) -----

NEGATED = {"<": ">=", ">=": "<", ">": "<=", "<=": ">", "==": "!=", "!=": "==",
           "is": "is not", "is not": "is", "in": "not in", "not in": "in"}
BOUNDARY = {"<": "<=", "<=": "<", ">": ">=", ">=": ">"}
_CMP = re.compile(r"not\s+in\b|is\s+not\b|\bin\b|\bis\b|==|!=|<=|>=|<|>")
_ARITH = re.compile(r"[+-]")


def _in_gap(text: _Text, left: ast.AST, right: ast.AST, pattern: re.Pattern[str],
            new: Callable[[str], str | None], what: str) -> list[Splice]:
    """The operator between two operands, replaced (its spelling normalised by one space)."""
    offset, gap = text.gap(left, right)
    found = pattern.search(gap)
    if found is None:
        return []
    old = " ".join(found.group().split())
    replacement = new(old)
    if replacement is None:
        return []
    start = offset + len(gap[:found.start()].encode())
    return [Splice(start, start + len(found.group().encode()), replacement,
                   f"{what}: `{old}` -> `{replacement}`")]


def _comparison(node: ast.AST, text: _Text, table: dict[str, str], what: str) -> list[Splice]:
    if not isinstance(node, ast.Compare) or len(node.ops) != 1:
        return []
    return _in_gap(text, node.left, node.comparators[0], _CMP, table.get, what)


def cmp_negate(node: ast.AST, text: _Text) -> list[Splice]:
    """A comparison flipped: `<` to `>=`, `==` to `!=`, `in` to `not in`..."""
    return _comparison(node, text, NEGATED, "comparison negated")


def cmp_boundary(node: ast.AST, text: _Text) -> list[Splice]:
    """An off-by-one in a comparison: `<` to `<=` and back, `>` to `>=` and back."""
    return _comparison(node, text, BOUNDARY, "comparison boundary moved")


def off_by_one(node: ast.AST, text: _Text) -> list[Splice]:
    """`x + k` / `x - k` with an integer k: k+1, then k-1."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub)):
        return []
    const = node.right
    if not (isinstance(const, ast.Constant) and type(const.value) is int):
        return []
    start, end = text.span(const)
    return [Splice(start, end, str(const.value + d), f"constant {const.value} -> {const.value + d}")
            for d in (1, -1)]


def arith_swap(node: ast.AST, text: _Text) -> list[Splice]:
    """`a + b` to `a - b` and back."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub)):
        return []
    if any(isinstance(side, ast.JoinedStr | ast.Tuple | ast.List)
           or (isinstance(side, ast.Constant) and isinstance(side.value, str))
           for side in (node.left, node.right)):
        return []  # concatenation, not arithmetic
    return _in_gap(text, node.left, node.right, _ARITH, {"+": "-", "-": "+"}.get,
                   "arithmetic swapped")


def min_max(node: ast.AST, text: _Text) -> list[Splice]:
    """`min(...)` to `max(...)` and back: where a high watermark or a bound is taken."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in ("min", "max")):
        return []
    start, end = text.span(node.func)
    other = "max" if node.func.id == "min" else "min"
    return [Splice(start, end, other, f"`{node.func.id}` -> `{other}`")]


def _negate_test(test: ast.AST, text: _Text) -> list[Splice]:
    start, end = text.span(test)
    return [Splice(start, end, f"not ({text.of(test)})", "condition negated")]


def negate_cond(node: ast.AST, text: _Text) -> list[Splice]:
    """The condition of an `if`, `while` or conditional expression negated."""
    if not isinstance(node, ast.If | ast.While | ast.IfExp):
        return []
    if isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
        return []
    return _negate_test(node.test, text)


def and_or(node: ast.AST, text: _Text) -> list[Splice]:
    """`and` to `or` (or back) between a boolean operation's first two operands."""
    if not isinstance(node, ast.BoolOp):
        return []
    swap = {"and": "or", "or": "and"}.get
    return _in_gap(text, node.values[0], node.values[1], re.compile(r"\b(and|or)\b"), swap,
                   "boolean operator swapped")


def return_value(node: ast.AST, text: _Text) -> list[Splice]:
    """A boolean result inverted: `return True` to `return False`, `return a < b` to
    `return not (a < b)`."""
    if not isinstance(node, ast.Return) or node.value is None:
        return []
    value = node.value
    if isinstance(value, ast.Constant) and isinstance(value.value, bool):
        start, end = text.span(value)
        return [Splice(start, end, str(not value.value), f"returns {not value.value}")]
    if isinstance(value, ast.Compare | ast.BoolOp) or (
            isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not)):
        return _negate_test(value, text)
    return []


# Statements whose loss is only a log line or a debugging aid. Not `log`: in replication/ that
# is mostly a partition's Log (`log.close(clean)`), whose calls are protocol steps.
_QUIET_CALLS = ("print", "say", "logger", "logging", "warn", "warnings")


def _quiet(stmt: ast.stmt) -> bool:
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return False
    func = stmt.value.func
    while isinstance(func, ast.Attribute):
        func = func.value
    return isinstance(func, ast.Name) and func.id in _QUIET_CALLS


def drop_stmt(node: ast.AST, text: _Text) -> list[Splice]:
    """A state update skipped: an assignment or a call statement replaced by `pass`."""
    if not isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Expr):
        return []
    if isinstance(node, ast.AnnAssign) and node.value is None:
        return []
    if isinstance(node, ast.Expr) and (not isinstance(node.value, ast.Call) or _quiet(node)):
        return []  # docstrings, bare names, log lines
    start, end = text.span(node)
    return [Splice(start, end, "pass", "statement dropped")]


OPERATORS: dict[str, Callable[[ast.AST, _Text], list[Splice]]] = {
    "cmp-negate": cmp_negate,
    "cmp-boundary": cmp_boundary,
    "off-by-one": off_by_one,
    "arith-swap": arith_swap,
    "min-max": min_max,
    "negate-cond": negate_cond,
    "and-or": and_or,
    "return-value": return_value,
    "drop-stmt": drop_stmt,
}

# Functions whose mutants could only break a message, a representation or construction (a
# dropped attribute in __init__ is an AttributeError at start, never a protocol change).
_SKIPPED_FUNCTIONS = {"__init__", "__repr__", "__str__", "__post_init__", "to_dict", "from_dict"}


def _function_bodies(tree: ast.Module) -> Iterator[ast.AST]:
    """Every node inside a function or method, except those of _SKIPPED_FUNCTIONS: module-level
    constants and class bodies are configuration and declarations, not protocol steps."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) \
                and node.name not in _SKIPPED_FUNCTIONS:
            for stmt in node.body:
                yield from _walk_own(stmt)


def _walk_own(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes under `node`, not descending into nested functions (walked on their own)."""
    yield node
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from _walk_own(child)


def mutants_of_source(path: str, source: str) -> list[Mutant]:
    """Every mutant of one module's source, in id order (line, column, operator, index).
    Nested nodes may start at one place (`a + 1 + 2`, `a and b or c`): the index then counts
    on through the inner node's alternatives, in the AST's walk order, so ids stay unique."""
    text = _Text(source)
    found = []
    taken: Counter[tuple[str, int, int]] = Counter()
    for node in _function_bodies(ast.parse(source)):
        for name, operator in OPERATORS.items():
            for cut in operator(node, text):
                anchor = (name, node.lineno, node.col_offset)
                found.append(Mutant(path, name, node.lineno, node.col_offset, taken[anchor],
                                    cut.what, source, text.splice(cut)))
                taken[anchor] += 1
    return sorted(found, key=lambda m: (m.line, m.col, m.operator, m.index))


def mutants_of(root: Path, path: str) -> list[Mutant]:
    return mutants_of_source(path, (root / path).read_text())


def parse_id(mutant_id: str) -> tuple[str, str, int, int, int]:
    path, operator, line, col, index = mutant_id.rsplit(":", 4)
    if operator not in OPERATORS:
        raise ValueError(f"{mutant_id}: no operator {operator!r} (known: {', '.join(OPERATORS)})")
    return path, operator, int(line), int(col), int(index)


def mutant(root: Path, mutant_id: str) -> Mutant:
    """The mutant with this id, rebuilt from the module's current source; ValueError if the
    source no longer has it (the module changed since the id was written)."""
    path = parse_id(mutant_id)[0]
    for m in mutants_of(root, path):
        if m.id == mutant_id:
            return m
    raise ValueError(f"{mutant_id}: no such mutant in {path} as it is now")
