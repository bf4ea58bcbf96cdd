"""Command line: python -m nemesis.lazyfs {mount,ctl,umount} ... (see docs/lazyfs.md)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from nemesis.lazyfs.control import LazyFSClient, LazyFSError
from nemesis.lazyfs.mount import MountOptions, spawn_daemon, unmount
from nemesis.lazyfs.torn import MODES


def _on_off(value: str) -> bool:
    if value not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"expected on or off, got {value!r}")
    return value == "on"


def _non_negative(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return number


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m nemesis.lazyfs", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    mount = sub.add_parser("mount", help="mount BACKING at MOUNTPOINT with a lossy page cache")
    mount.add_argument("backing")
    mount.add_argument("mountpoint")
    mount.add_argument("--control", required=True, help="Unix socket path for control requests")
    mount.add_argument("--flush-interval-ms", type=_non_negative, default=0,
                       help="background flush period (0: never)")
    mount.add_argument("--dirty-limit-bytes", type=_non_negative, default=0,
                       help="flush everything when unsynced bytes exceed this (0: no limit)")
    mount.add_argument("--no-sync-backing", action="store_true",
                       help="do not fsync the backing files when flushing (faster, not crash-safe for the host)")
    mount.add_argument("--page-cached", action="append", default=[], metavar="SUFFIX",
                       help="with --no-writeback-cache: files whose names end so go through the "
                            "kernel page cache, so they can be memory-mapped (Kafka's indexes); "
                            "repeatable")
    mount.add_argument("--no-writeback-cache", action="store_true",
                       help="every read and write reaches the daemon as made (direct I/O) instead "
                            "of the kernel caching writes and handing over whole pages")
    mount.add_argument("--foreground", action="store_true", help="serve in this process")

    ctl = sub.add_parser("ctl", help="send a control request to a mount")
    ctl.add_argument("sock")
    ops = ctl.add_subparsers(dest="op", required=True)
    for name in ("lose-unsynced", "flush-all", "report", "ping"):
        ops.add_parser(name)
    torn = ops.add_parser("torn")
    torn.add_argument("--seed", type=_non_negative)
    torn.add_argument("--mode", choices=MODES, default="prefix")
    ops.add_parser("slow-fsync").add_argument("ms", type=_non_negative)
    ops.add_parser("eio-write").add_argument("state", type=_on_off)
    ops.add_parser("eio-fsync").add_argument("state", type=_on_off)

    umount = sub.add_parser("umount", help="unmount (lazily if the daemon is dead)")
    umount.add_argument("mountpoint")
    return parser


def _ctl(args: argparse.Namespace) -> dict[str, Any]:
    client = LazyFSClient(args.sock)
    if args.op == "torn":
        return client.torn(seed=args.seed, mode=args.mode)
    if args.op == "slow-fsync":
        return client.slow_fsync(args.ms)
    if args.op in ("eio-write", "eio-fsync"):
        return client.request(args.op, on=args.state)
    return client.request(args.op)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        if args.command == "mount":
            opts = MountOptions(args.backing, args.mountpoint, args.control, args.flush_interval_ms,
                                args.dirty_limit_bytes, sync_backing=not args.no_sync_backing,
                                page_cached=tuple(args.page_cached),
                                writeback_cache=not args.no_writeback_cache)
            if args.foreground:
                # imported here: only the daemon needs libfuse, ctl and umount do not
                from nemesis.lazyfs.daemon import run_foreground

                run_foreground(opts)
                return 0
            result: dict[str, Any] = {"pid": spawn_daemon(opts), "mountpoint": args.mountpoint,
                                      "control": args.control}
        elif args.command == "ctl":
            result = _ctl(args)
        else:
            result = unmount(args.mountpoint)
    except (OSError, LazyFSError, RuntimeError, ValueError) as exc:
        print(f"lazyfs {args.command}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=None, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
