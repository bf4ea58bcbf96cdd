"""Argument types shared by the subcommands."""

from __future__ import annotations

import argparse
import re

from checkers.exitcodes import UserError
from harness.campaign_spec import check_seed_option
from harness.system_spec import SystemSpec, parse_system, parse_systems

_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([dhms])")


def parse_duration(text: str) -> int | float:
    """"2h", "30m", "90s", "1h30m", "1.5h" or bare seconds ("90") -> seconds (> 0)."""
    s = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", s):
        seconds = float(s)
    elif s and _DURATION.sub("", s) == "":
        seconds = sum(float(n) * _UNITS[u] for n, u in _DURATION.findall(s))
    else:
        raise argparse.ArgumentTypeError(
            f"bad duration {text!r}: expected e.g. 90, 90s, 30m, 2h, 1h30m")
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"bad duration {text!r}: must be > 0")
    return int(seconds) if seconds.is_integer() else seconds


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"bad port {text!r}: expected 1..65535")
    return value


def add_test_options(parser: argparse.ArgumentParser) -> None:
    """The options that define a test, shared by `run` and `simulate`."""
    parser.add_argument("--config", metavar="FILE.toml",
                        help="test file, or a profile name from harness/profiles (e.g. fast)")
    parser.add_argument("--nodes", type=int, metavar="N",
                        help="hosts: n1 controller, rest brokers")
    parser.add_argument("--nemesis", metavar="LIST",
                        help="comma-separated faults, e.g. kill,partition; 'none' for none")
    parser.add_argument("--time-limit", type=parse_duration, metavar="S",
                        help="seconds of workload and nemesis (90, 90s, 5m)")
    parser.add_argument("--seed", type=int, metavar="N")
    parser.add_argument("--set", action="append", default=[], metavar="K=V",
                        help="override a setting, e.g. system.min.insync.replicas=2 (repeatable)")


def system(text: str) -> SystemSpec:
    """sim | embedded | kafka[:VERSION] (harness.system_spec)."""
    try:
        return parse_system(text)
    except UserError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def systems(text: str) -> list[SystemSpec]:
    """A comma-separated list of systems, each named once."""
    try:
        return parse_systems(text)
    except UserError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def campaign_seeds(text: str) -> str:
    """A campaign's `--seeds` ("A-B" or "1,2,5"), refused here when it names no seeds or too
    many (harness.campaign_spec reads it)."""
    try:
        return check_seed_option(text)
    except ValueError as e:  # CampaignError, which names "--seeds" as argparse does too
        raise argparse.ArgumentTypeError(str(e).removeprefix("--seeds: ")) from None
