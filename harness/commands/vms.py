"""`harness vms up|down|status|probe`: the VM hosts of vagrant/ (what `make vms` runs).

A thin front for vagrant/vms.py, which is standard-library only so that it runs with any
python3 on the machine that runs vagrant; docs/vms.md says what each step does."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from checkers.exitcodes import Exit

NAME = "vms"
HELP = "bring the VM hosts of vagrant/ up or down (build the box, libvirt, vagrant, inventory)"
VMS_SCRIPT = Path(__file__).resolve().parents[2] / "vagrant" / "vms.py"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("up", "down", "status", "probe"))
    parser.add_argument("--vms", type=int, default=None, metavar="N",
                        help="up: number of VMs (default 4)")
    parser.add_argument("--accel", choices=("auto", "kvm", "tcg"), default=None,
                        help="up: auto probes KVM and falls back to TCG (default)")
    parser.add_argument("--box", action="store_true", help="down: remove the built box too")


def vms_argv(args: argparse.Namespace) -> list[str]:
    """The vagrant/vms.py command line for these arguments."""
    argv = [sys.executable, str(VMS_SCRIPT), args.action]
    if args.action == "up":
        if args.vms is not None:
            argv += ["--vms", str(args.vms)]
        if args.accel is not None:
            argv += ["--accel", args.accel]
    elif args.action == "down" and args.box:
        argv.append("--box")
    return argv


def main(args: argparse.Namespace) -> int:
    if not VMS_SCRIPT.exists():
        print(f"harness vms: {VMS_SCRIPT} is missing (run from a checkout of the project)",
              file=sys.stderr)
        return Exit.ERROR
    return Exit.VALID if subprocess.run(vms_argv(args)).returncode == 0 else Exit.ERROR
