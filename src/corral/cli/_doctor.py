"""``corral doctor``: what the kernel offers for isolation and what corral will use."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from corral._config import Config
from corral.cli._exit import EXIT_OK, EXIT_OTHER
from corral.engine import Languages, discover_languages
from corral.errors import ConfigError, LanguageUnavailable
from corral.sandbox import DENIED_SYSCALLS, SECCOMP_POLICY, doctor

__all__ = ["doctor_command"]


def _languages() -> Languages:
    try:
        return Config.load().languages()
    except (ConfigError, LanguageUnavailable):  # the doctor reports, it does not refuse
        return discover_languages()


def doctor_command(args: argparse.Namespace) -> int:
    report = doctor()
    languages = _languages()
    if args.json:
        data = report.as_dict()
        data["seccomp_denied"] = list(DENIED_SYSCALLS)
        data["seccomp_policy"] = SECCOMP_POLICY.as_dict()
        data["languages"] = languages.as_dict()
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
    served = Table(title="languages")
    served.add_column("language")
    served.add_column("served")
    served.add_column("toolchain, or why not")
    for name, entry in languages.as_dict().items():
        assert isinstance(entry, dict)
        mark = "[green]yes[/]" if entry["served"] else "[yellow]no[/]"
        served.add_row(name, mark, str(entry["detail"]))
    console.print(served)
    cgroups = next((f for f in report.features if f.name == "cgroups"), None)
    walls = (
        "a cgroup per sandbox bounding the memory, processes and CPU of all its processes together"
        if cgroups is not None and cgroups.available
        else "no cgroups: memory and processes are bounded per process only"
    )
    console.print(
        "Workers: own user, pid, mount, network, ipc, uts and cgroup namespaces; uid 1000 "
        "(a host uid of its own outside) with no capabilities; no_new_privs; a seccomp "
        f"allowlist of {len(SECCOMP_POLICY.allowed_names())} syscalls (EPERM for "
        f"{len(DENIED_SYSCALLS)} more, ENOSYS for any other); rlimits on CPU, memory, "
        f"processes, file size and open files; {walls}; a fresh tmpfs root."
    )
    if report.ok:
        console.print("[green]corral can isolate workers on this host.[/]")
        return EXIT_OK
    for problem in report.problems:
        console.print(f"[red]{problem}[/]")
    console.print("[red]The engine will refuse to start until these are fixed.[/]")
    return EXIT_OTHER
