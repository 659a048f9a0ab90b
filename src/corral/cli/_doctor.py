"""``corral doctor``: what the kernel offers for isolation and what corral will use."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from corral.cli._main import EXIT_OK, EXIT_OTHER
from corral.sandbox import DENIED_SYSCALLS, SECCOMP_POLICY, doctor

__all__ = ["doctor_command"]


def doctor_command(args: argparse.Namespace) -> int:
    report = doctor()
    if args.json:
        data = report.as_dict()
        data["seccomp_denied"] = list(DENIED_SYSCALLS)
        data["seccomp_policy"] = SECCOMP_POLICY.as_dict()
        print(json.dumps(data, indent=2))
        return EXIT_OK if report.ok else EXIT_OTHER
    console = Console()
    table = Table(title="corral doctor")
    table.add_column("feature")
    table.add_column("status")
    table.add_column("needed")
    table.add_column("detail")
    for feature in report.features:
        status = (
            "[green]yes[/]"
            if feature.available
            else ("[red]missing[/]" if feature.required else "[yellow]no[/]")
        )
        table.add_row(
            feature.name, status, "required" if feature.required else "optional", feature.detail
        )
    console.print(table)
    console.print(
        "Workers: own user, pid, mount, network, ipc and uts namespaces; uid 1000 "
        "(a host uid of its own outside) with no capabilities; no_new_privs; a seccomp "
        f"allowlist of {len(SECCOMP_POLICY.allowed_names())} syscalls (EPERM for "
        f"{len(DENIED_SYSCALLS)} more, ENOSYS for any other); rlimits on CPU, memory, "
        "processes, file size and open files; a fresh tmpfs root."
    )
    if report.ok:
        console.print("[green]corral can isolate workers on this host.[/]")
        return EXIT_OK
    for problem in report.problems:
        console.print(f"[red]{problem}[/]")
    console.print("[red]The engine will refuse to start until these are fixed.[/]")
    return EXIT_OTHER
