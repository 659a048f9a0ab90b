"""``corral template``'s arguments (parsed before anything heavy is imported)."""

from __future__ import annotations

from typing import Any

__all__ = ["add_template_parser"]


def add_template_parser(commands: Any) -> None:
    """Add ``template build | list | show | rm`` to the ``corral`` parser's subcommands."""
    template = commands.add_parser(
        "template", help="build, list, show or remove templates (named runtimes)"
    )
    actions = template.add_subparsers(dest="template_command", required=True, metavar="ACTION")
    build = actions.add_parser(
        "build", help="build a template in a sandbox and store it in the data folder"
    )
    build.add_argument("name", help="the template's name (lower-case letters, digits, . _ -)")
    build.add_argument(
        "-r", dest="requirements", action="append", default=[], metavar="FILE",
        help="pip install -r FILE (its text goes into the build); repeatable",
    )  # fmt: skip
    repeat: list[tuple[str, str, str]] = [
        ("--pip", "PKG", "pip install this requirement"),
        ("--copy", "SRC:DST", "copy a file (or a folder) into the sandbox's home"),
        ("--env", "K=V", "an environment variable for the later steps and every sandbox"),
        ("--run", "CMD", "a shell command run in the build's sandbox, as its user"),
        ("--preload", "MOD", "a module each of the template's workers imports ahead"),
    ]
    for flag, metavar, text in repeat:
        build.add_argument(
            flag, action="append", default=[], metavar=metavar, help=text + "; repeatable"
        )
    build.add_argument("--workdir", metavar="DIR", help="where the template's code starts")
    build.add_argument(
        "--base", default="code-interpreter-v1", choices=("code-interpreter-v1", "base"),
        help="the runtime it starts from (base: nothing preloaded)",
    )  # fmt: skip
    build.add_argument(
        "--timeout", type=float, default=900.0, metavar="S", help="seconds for the whole build"
    )
    for name, text in (("list", "list the templates"), ("show", "show one template")):
        parser = actions.add_parser(name, help=text)
        if name == "show":
            parser.add_argument("name")
        parser.add_argument("--json", action="store_true", help="print JSON")
    actions.add_parser("rm", help="remove a template").add_argument("name")
    for parser in actions.choices.values():
        parser.add_argument("--config", metavar="FILE", help="corral.toml")
