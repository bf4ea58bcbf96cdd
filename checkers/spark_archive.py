"""The Spark driver JVM's class archive (Java's application class-data sharing, AppCDS).

A new session's JVM loads, parses and verifies some 10,000 classes of Spark and its
libraries: about 15 s of CPU and 9 s of wall time on the 2-core machines here
(docs/checkers.md). An archive of those classes, dumped once from a session that ran the
checks, is mapped by every later driver JVM instead: 5.3 s and 9 s of CPU. `make bootstrap`
builds it (`python -m checkers.spark_archive`); a session without one starts as before.

The archive belongs to one JVM and one set of jars, and the JVM maps the classes in it as
its own code, so it is kept in this Python environment's prefix (the venv, as writable as
the code that runs), named by a digest of the java binary, its module image and pyspark's
jars, and used only when it is a regular file that only its owner (us or root) can write,
below parents nobody else can rename.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import stat
import sys
from pathlib import Path

import pyspark

from control.files import (
    UnsafePathError,
    check_trusted_parents,
    make_private_tempdir,
    remove_private_dir,
    write_text_atomic,
)

ARCHIVE_DIR = Path(sys.prefix) / "share" / "harness"
# The options a dump and every use share (the GC shapes the archived classes' layout: a JVM
# with another collector would not map them), and the JVM's own CDS logging off: its
# warnings (a class it cannot archive, an archive it cannot map) go to stdout, which is the
# checker's.
JVM_OPTIONS = "-XX:+UseParallelGC"
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def digest(java: str) -> str:
    """What the archive depends on: the java binary and its module image (both change with
    any JDK update), pyspark's version and its jars' names and sizes, and JVM_OPTIONS."""
    binary = Path(os.path.realpath(java))
    jars = Path(pyspark.__file__).parent / "jars"
    parts = [str(binary), pyspark.__version__, JVM_OPTIONS]
    for path in [binary, binary.parent.parent / "lib" / "modules"]:
        st = os.stat(path) if path.exists() else None
        parts.append(f"{path} {st and st.st_size} {st and st.st_mtime_ns}")
    if jars.is_dir():
        parts += sorted(f"{p.name} {p.stat().st_size}" for p in jars.iterdir())
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:20]


def archive_path(java: str) -> Path:
    return ARCHIVE_DIR / f"spark-driver-{digest(java)}.jsa"


def _seal_path(archive: Path) -> Path:
    return archive.with_suffix(".dumped")


def _seal(st: os.stat_result) -> str:
    return json.dumps({"size": st.st_size, "mtime_ns": st.st_mtime_ns})


def options(java: str) -> str:
    """The driver JVM's options to map this JVM's archive, or "" when there is none that can
    be trusted (then the session starts without it, as it did before there were archives).
    Besides who may write it, the archive must be as its dump left it (its size and time,
    sealed beside it by `build`): a JVM handed a truncated archive dies of SIGBUS as it maps
    it, and the check with it."""
    path = archive_path(java)
    try:
        st = os.lstat(path)
        check_trusted_parents(path)
        seal = _seal_path(path).read_text()
    except (FileNotFoundError, UnsafePathError):
        return ""
    if not stat.S_ISREG(st.st_mode) or st.st_uid not in (0, os.geteuid()):
        return ""
    if stat.S_IMODE(st.st_mode) & 0o022:
        return ""
    if seal != _seal(st):
        from checkers.spark import say  # which imports this module

        say(f"{path} is not as it was dumped (its size or time changed): not used; `make "
            "bootstrap` dumps it anew")
        return ""
    return f"-XX:SharedArchiveFile={path} {QUIET}"


def build(master: str = "local[2]") -> Path:
    """Dump the archive from a session that runs the checks (the SQL plans and the native
    checks in Spark's tasks) on a small history, and move it into place; its path."""
    from checkers import spark  # imports this module: here, not at the top

    java = spark.java_runs()
    target = archive_path(java)
    ARCHIVE_DIR.mkdir(parents=True, exist_ok=True)
    scratch = make_private_tempdir(".spark-archive-", ARCHIVE_DIR)
    try:
        dumped = scratch / target.name
        session = spark.start_session(master, f"-XX:ArchiveClassesAtExit={dumped} {QUIET}")
        _exercise(session, scratch)
        jvm = session.sparkContext._gateway.proc
        session.stop()
        jvm.stdin.close()  # PySpark's gateway exits at the end of its stdin, dumping as it goes
        if jvm.wait(timeout=300) != 0 or not dumped.is_file():
            raise RuntimeError(f"the driver JVM exited with {jvm.returncode} and no archive")
        os.chmod(dumped, 0o644)
        for old in [*ARCHIVE_DIR.glob("spark-driver-*.jsa"), *ARCHIVE_DIR.glob("*.dumped")]:
            old.unlink()  # an earlier JDK's or pyspark's: never mapped again
        os.replace(dumped, target)
        write_text_atomic(_seal_path(target), _seal(os.stat(target)))
        return target
    finally:
        remove_private_dir(scratch)


def _exercise(session: object, scratch: Path) -> None:
    """The checks on a small history: the classes a real check loads are the ones dumped."""
    from checkers import spark_checks, spark_native
    from checkers.ingest import ingest
    from checkers.native_checks import binary

    history = scratch / "history.jsonl"
    lines = []
    for v in range(40):
        p = v % 2
        lines.append({"process": v % 4, "type": "invoke", "f": "send", "partition": p, "value": v})
        lines.append({"process": v % 4, "type": "ok", "f": "send", "partition": p, "value": v,
                      "offset": v // 2, "node": 1, "epoch": 1})
    for p in range(2):  # a final read of each partition, with one acknowledged record lost
        records = [[v // 2, v] for v in range(p, 40, 2) if v != 2]
        lines.append({"process": f"f{p}", "type": "invoke", "f": "final-poll", "partition": p,
                      "offset": 0})
        lines.append({"process": f"f{p}", "type": "ok", "f": "final-poll", "partition": p,
                      "records": records, "hwm": 20})
    history.write_text("".join(json.dumps({"index": i, "time": i * 1000, **op}) + "\n"
                               for i, op in enumerate(lines)))
    ing = ingest(history, scratch / "tables")
    spark_native.warm_up(session)
    for plan in ("sql", "native") if binary() is not None else ("sql",):
        out = spark_checks.run(session, ing.ops_path, ing.reads_path, "all", plan=plan)
        if len(out.unread) != 1:  # the acknowledged record the final reads lack
            raise RuntimeError(f"the archive's exercise found {len(out.unread)} unread "
                               f"records, not 1 ({plan})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m checkers.spark_archive",
                                 description="dump the Spark driver JVM's class archive")
    ap.add_argument("--if-missing", action="store_true",
                    help="only when this JVM and these jars have none yet")
    args = ap.parse_args(argv)
    from checkers.spark import java_runs

    java = java_runs()
    path = archive_path(java)
    if args.if_missing and options(java):
        print(f"the Spark driver's class archive is there: {path}")
        return 0
    print("dumping the Spark driver's class archive (about 90 s on 2 cores) ...", flush=True)
    print(build())
    return 0


if __name__ == "__main__":
    sys.exit(main())
