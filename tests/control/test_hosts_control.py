"""Command construction for remote hosts (pure; the real SSH paths are in test_hosts.py)."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from control.remote import as_root, to_command

NASTY = ["a b", "", "'", '"', "$(id)", "`id`", ";", "*", "line1\nline2", "-x", "ünï"]


def test_lists_are_quoted_so_a_shell_gives_back_the_same_argv():
    command = to_command(["printf", "%s\\0", *NASTY])
    out = subprocess.run(["sh", "-c", command], capture_output=True, check=True).stdout
    assert out.decode().split("\0")[:-1] == NASTY


def test_strings_are_the_callers_own_shell_line():
    assert to_command("echo $HOME | wc -c") == "echo $HOME | wc -c"


def test_empty_argv_is_refused():
    with pytest.raises(ValueError, match="empty argv"):
        to_command([])


def test_as_root_wraps_the_whole_line_for_sudo():
    line = to_command(["iptables", "-S", "it's"]) + " && echo done"
    assert shlex.split(as_root(line)) == ["sudo", "-n", "--", "sh", "-c", line]
