"""An AST mutator of our own: each mutant is one small change to one module's source.

Why not mutmut or cosmic-ray: both run a test command in-process or swap files in the working
tree; here a mutant is simulated in child processes (and Spark tasks) that must load the
mutated module while the checkout stays untouched, so all a mutant needs to be is its id.

A mutant's id is `PATH:FUNCTION:OPERATOR:DIGEST:K`: the module, the enclosing function's
qualified name (`Class.method`), the operator, a digest of what changes (the source lines the
change touches, stripped of indentation, where on them it falls, and the replacement text) and
which of the function's mutants with that same operator and digest it is (0 but for repeated
identical lines). An edit elsewhere in the module, or elsewhere in the function, moves lines but
changes no id; only an edit of the mutated line itself, or a rename of its function, does. The
older ids, `PATH:OPERATOR:LINE:COL:INDEX` (the AST node's position), are still read: `mutant`
rebuilds either kind from the module's current source, and `Mutant.place` is the old form.
The change is spliced into the source text at the node's position, so the rest of the file,
its comments and line numbers stay as they were and the diff shows just the change.

What a child runs is the mutant's `probed` source: the same change, with a call of a counter
(PROBE, a `Probe` the child puts in the module's globals, so that the protocol imports
nothing) around the changed code, so that a campaign records whether, and how often, the
changed code itself ran (`probed`, below). The diff and the id are of `source`, without it.

It imports nothing of the protocol (pyproject.toml's import-linter contract): the child
process builds the mutant before the mutated module is first imported."""

from __future__ import annotations

import ast
import bisect
import difflib
import hashlib
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
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
    function: str = ""  # the enclosing function's qualified name
    digest: str = ""  # of what changes (_digest)
    nth: int = 0  # among the function's mutants with this operator and digest
    probed: str = ""  # `source` with the probe around the changed code (what a child runs)

    @property
    def id(self) -> str:
        """The stable id: it survives edits of other lines."""
        return f"{self.path}:{self.function}:{self.operator}:{self.digest}:{self.nth}"

    @property
    def place(self) -> str:
        """The older id, by position: every edit above the line moves it."""
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

    def context(self, cut: Splice) -> tuple[str, int]:
        """The lines `cut` touches, each stripped of its indentation, and where on them it
        starts (counted from the first line's first non-blank character)."""
        first = bisect.bisect_right(self.starts, cut.start) - 1
        last = bisect.bisect_right(self.starts, max(cut.start, cut.end - 1)) - 1
        lines = self.data[self.starts[first]:self.starts[last + 1]].decode().splitlines()
        head = self.data[self.starts[first]:cut.start].decode()
        return "\n".join(line.strip() for line in lines), len(head.lstrip())


# ---- the probe: whether, and how often, a mutant's changed code ran -------------------------

PROBE = "__mutant_probe__"  # its name in the mutated module's globals (dunder: never mangled)


class Probe:
    """The counter a mutated module calls each time its changed code runs. It returns None,
    so `(PROBE() or (X))` is X: the probe changes no value and no evaluation order."""

    def __init__(self) -> None:
        self.hits = 0

    def __call__(self) -> None:
        self.hits += 1


def _probed_node(node: ast.AST) -> ast.AST:
    """What the probe goes around: the expression a mutant changes (a comparison, an
    arithmetic, a call, a boolean operation, a conditional expression), the condition of an
    `if` or `while` (evaluated each time the statement runs, each loop round included), the
    value of a `return`; or the statement a `drop-stmt` mutant replaces."""
    if isinstance(node, ast.If | ast.While):
        return node.test
    if isinstance(node, ast.Return) and node.value is not None:
        return node.value
    return node


def with_probe(text: _Text, node: ast.AST, cut: Splice) -> str:
    """The mutated source with the probe around the changed code, on the same lines (no line
    is added: tracebacks name the lines of the file). An expression X becomes `(PROBE() or
    (X'))`, X' its mutated text, so the probe counts each evaluation of the changed code and
    none of a short-circuited operand it sits in; a dropped statement becomes the call
    `PROBE()` where the mutant has `pass`."""
    target = _probed_node(node)
    start, end = text.span(target)
    if not start <= cut.start <= cut.end <= end:
        raise ValueError(f"line {node.lineno}: the change lies outside the probed node")
    if not isinstance(target, ast.expr):  # a statement a drop-stmt mutant replaces
        return text.splice(Splice(start, end, f"{PROBE}()", "probe"))
    changed = (text.data[start:cut.start] + cut.text.encode() + text.data[cut.end:end]).decode()
    return text.splice(Splice(start, end, f"({PROBE}() or ({changed}))", "probe"))


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


def _functions(node: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    """Every function or method under `node` with its qualified name (`Class.method`,
    `outer.inner`), nested ones included."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}{child.name}"
            if not isinstance(child, ast.ClassDef):
                yield name, child
            yield from _functions(child, f"{name}.")
        else:
            yield from _functions(child, prefix)


def _function_bodies(tree: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    """Every node inside a function or method, with the function's qualified name, except
    those of _SKIPPED_FUNCTIONS: module-level constants and class bodies are configuration
    and declarations, not protocol steps."""
    for name, function in _functions(tree):
        if function.name not in _SKIPPED_FUNCTIONS:
            for stmt in function.body:
                for node in _walk_own(stmt):
                    yield name, node


def _walk_own(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes under `node`, not descending into nested functions (walked on their own)."""
    yield node
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from _walk_own(child)


def _digest(operator: str, text: _Text, cut: Splice) -> str:
    """What a change is, independent of where its lines are: the lines it touches (without
    their indentation), its place on them and its replacement text."""
    lines, col = text.context(cut)
    return hashlib.sha256(f"{operator}\0{lines}\0{col}\0{cut.text}".encode()).hexdigest()[:8]


def mutants_of_source(path: str, source: str) -> list[Mutant]:
    """Every mutant of one module's source, in source order (line, column, operator, index).
    Nested nodes may start at one place (`a + 1 + 2`, `a and b or c`): the place's index
    then counts on through the inner node's alternatives, in the AST's walk order."""
    text = _Text(source)
    found = []
    taken: Counter[tuple] = Counter()
    for function, node in _function_bodies(ast.parse(source)):
        for name, operator in OPERATORS.items():
            for cut in operator(node, text):
                anchor = (name, node.lineno, node.col_offset)
                digest = _digest(name, text, cut)
                found.append(Mutant(path, name, node.lineno, node.col_offset, taken[anchor],
                                    cut.what, source, text.splice(cut), function, digest,
                                    probed=with_probe(text, node, cut)))
                taken[anchor] += 1
    found.sort(key=lambda m: (m.line, m.col, m.operator, m.index))
    return _numbered(found)


def _numbered(found: list[Mutant]) -> list[Mutant]:
    """Each mutant's `nth` among those of its function with its operator and digest, in
    source order."""
    seen: Counter[tuple[str, str, str]] = Counter()
    out = []
    for m in found:
        key = (m.function, m.operator, m.digest)
        out.append(replace(m, nth=seen[key]))
        seen[key] += 1
    return out


def mutants_of(root: Path, path: str) -> list[Mutant]:
    return mutants_of_source(path, (root / path).read_text())


def parse_id(mutant_id: str) -> tuple[str, str, int, int, int]:
    """An older, positional id's parts: (path, operator, line, col, index)."""
    path, operator, line, col, index = mutant_id.rsplit(":", 4)
    if operator not in OPERATORS:
        raise ValueError(f"{mutant_id}: no operator {operator!r} (known: {', '.join(OPERATORS)})")
    return path, operator, int(line), int(col), int(index)


def is_positional(mutant_id: str) -> bool:
    """Whether an id is of the older kind, `PATH:OPERATOR:LINE:COL:INDEX`."""
    return mutant_id.count(":") == 4 and mutant_id.split(":")[1] in OPERATORS


def mutant(root: Path, mutant_id: str) -> Mutant:
    """The mutant with this id (stable or positional), rebuilt from the module's current
    source; ValueError if the source no longer has it (the mutated line was edited)."""
    path = mutant_id.split(":", 1)[0]
    if is_positional(mutant_id):
        parse_id(mutant_id)
    elif mutant_id.count(":") != 4 or mutant_id.split(":")[2] not in OPERATORS:
        raise ValueError(f"{mutant_id}: not a mutant id (PATH:FUNCTION:OPERATOR:DIGEST:K, "
                         f"or PATH:OPERATOR:LINE:COL:INDEX; known operators: "
                         f"{', '.join(OPERATORS)})")
    for m in mutants_of(root, path):
        if mutant_id in (m.id, m.place):
            return m
    raise ValueError(f"{mutant_id}: no such mutant in {path} as it is now")


def changed_lines(diff: str) -> list[str]:
    """The lines a unified diff removes and adds, each stripped, with its sign."""
    return [line[0] + line[1:].strip() for line in diff.splitlines()
            if line[:1] in "+-" and not line.startswith(("---", "+++"))]


def resolve(root: Path, mutant_id: str, diff: str | None = None) -> Mutant:
    """The mutant an id of either kind names now. With the diff recorded beside an id (an
    older campaign's mutants.json), the diff decides: a positional id whose line moved is
    found again as the one mutant of its module and operator with that same change."""
    try:
        found = mutant(root, mutant_id)
    except ValueError:
        if diff is None:
            raise
        found = None
    if found is not None and (diff is None or changed_lines(found.diff()) == changed_lines(diff)):
        return found
    path, *parts = mutant_id.split(":")
    operator = parts[0] if is_positional(mutant_id) else parts[1]
    change = changed_lines(diff or "")
    same = [m for m in mutants_of(root, path)
            if m.operator == operator and changed_lines(m.diff()) == change]
    if len(same) != 1:
        raise ValueError(f"{mutant_id}: {len(same)} mutants of {path} as it is now make its "
                         "recorded change")
    return same[0]
