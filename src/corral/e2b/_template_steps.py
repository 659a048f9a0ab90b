"""E2B's template build request as a corral ``TemplateSpec``, or a refusal naming the step.

E2B's SDK sends ``{fromImage | fromTemplate, steps: [{type, args, filesHash}], startCmd,
readyCmd}``. corral builds on its own runtime only: ``from_template("code-interpreter-v1")``
(numpy, pandas, matplotlib preloaded), ``from_template("base")`` or ``from_base_image()``
(nothing preloaded). ``pip_install`` (a ``RUN pip install ...``, as root by default) installs
into the layer; ``copy`` takes the files the SDK uploaded; ``set_envs``, ``set_workdir`` and
``run_cmd`` (as the sandbox's user) are steps as they are. What needs an image or root (other
images, Dockerfiles, registries, ``apt_install`` and any other command as root) and a start
command are refused with the step's number and what it was, before anything runs.
"""

from __future__ import annotations

import io
import posixpath
import re
import shlex
import tarfile
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from corral.errors import TemplateError
from corral.templates import BASES, CopyFile, Env, Pip, Run, Step, TemplateSpec, Workdir
from corral.templates import home_path as _home_path

__all__ = ["BuildStart", "TemplateStep", "spec_from_e2b", "upload_files"]

_BASE_IMAGE = re.compile(r"(docker\.io/)?e2bdev/base(:[\w.-]+)?")
"""``from_base_image()`` (and a template that names no base): E2B's base image."""
_PIP = re.compile(r"\s*(?:python3? -m )?pip3? install((?:\s+--user)?)\s+(.+)")
_OCTAL = re.compile(r"[0-7]{1,4}")
_MAX_MEMBERS = 10_000
_MAX_STEPS = 256


class TemplateStep(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    type: str = Field(max_length=32)
    args: list[str] = Field(default_factory=list, max_length=1024)
    filesHash: str | None = Field(default=None, max_length=128)
    force: bool | None = None


class BuildStart(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    fromImage: str | None = Field(default=None, max_length=1024)
    fromTemplate: str | None = Field(default=None, max_length=256)
    fromImageRegistry: dict[str, object] | None = None
    force: bool | None = None
    steps: list[TemplateStep] = Field(default_factory=list, max_length=_MAX_STEPS)
    startCmd: str | None = Field(default=None, max_length=8192)
    readyCmd: str | None = Field(default=None, max_length=8192)


def _base(body: BuildStart) -> str:
    if body.fromImageRegistry:
        raise TemplateError(
            "step 0 (a private registry): corral templates start from corral's own runtime, "
            "not an image; use from_template('code-interpreter-v1') or from_base_image()"
        )
    if body.fromTemplate is not None:
        if body.fromTemplate not in BASES:
            raise TemplateError(
                f"step 0 (from_template {body.fromTemplate!r}): a template starts from "
                f"{' or '.join(repr(b) for b in BASES)}, not from another template"
            )
        return body.fromTemplate
    if body.fromImage is None or _BASE_IMAGE.fullmatch(body.fromImage):
        return "base"
    raise TemplateError(
        f"step 0 (from_image {body.fromImage!r}): corral templates start from corral's own "
        "runtime, not a Docker image (no from_image, from_dockerfile or registries); use "
        "from_template('code-interpreter-v1') or from_base_image()"
    )


def _run(index: int, args: list[str]) -> Step:
    command = args[0] if args else ""
    user = args[1] if len(args) > 1 else ""
    pip = _PIP.fullmatch(command)
    if pip is not None and "&&" not in command and ";" not in command:
        packages = tuple(shlex.split(pip.group(2)))
        if packages and packages != (".",) and not any(p.startswith("-") for p in packages):
            return Pip(packages)
    if user == "root":
        what = "apt_install" if "apt-get" in command else "run_cmd as root"
        raise TemplateError(
            f"step {index} ({what}: {command[:120]!r}): a corral sandbox has no root, so a "
            "template cannot install OS packages or run commands as root; pip_install and "
            "run_cmd as the sandbox's user work"
        )
    return Run(command)


def spec_from_e2b(
    body: BuildStart, files_for: Callable[[int, TemplateStep], list[CopyFile]]
) -> TemplateSpec:
    """The spec E2B's build body describes; ``files_for`` gives a COPY step's files.

    Raises:
        TemplateError: a step corral cannot build, named by its number (1 is the first after
            the base, as the SDK counts them).
    """
    base = _base(body)
    if body.startCmd or body.readyCmd:
        raise TemplateError(
            f"step {len(body.steps) + 1} (set_start_cmd/set_ready_cmd): corral sandboxes start "
            "no process at create; start it with commands.run(..., background=True)"
        )
    steps: list[Step] = []
    for index, step in enumerate(body.steps, start=1):
        kind = step.type.upper()
        if kind == "RUN":
            steps.append(_run(index, step.args))
        elif kind == "COPY":
            steps.extend(files_for(index, step))
        elif kind == "ENV":
            if len(step.args) % 2:
                raise TemplateError(f"step {index} (set_envs): names and values come in pairs")
            pairs = tuple(zip(step.args[::2], step.args[1::2], strict=True))
            steps.append(Env(pairs))
        elif kind == "WORKDIR" and step.args:
            steps.append(Workdir(step.args[0]))
        elif kind == "USER" and step.args and step.args[0] != "root":
            continue  # the sandbox has one user; naming it changes nothing
        else:
            what = " ".join([kind, *step.args])[:120]
            raise TemplateError(f"step {index} ({what!r}): corral templates cannot do this")
    return TemplateSpec(base=base, steps=tuple(steps))


def upload_files(index: int, args: list[str], archive: bytes, limit: int) -> list[CopyFile]:
    """A COPY step's files from the tar (gzip or not) the SDK uploaded for it.

    Only regular files are taken (links, devices and folders are not), read from the archive
    in memory, never extracted onto a disk: a member's name says where it goes in the home.

    Raises:
        TemplateError: a bad archive, a destination outside the home, or more than ``limit``
            bytes.
    """
    src = args[0].rstrip("/") if args else ""
    dest = args[1] if len(args) > 1 else ""
    mode = None
    if len(args) > 3 and args[3]:
        if not _OCTAL.fullmatch(args[3]):
            raise TemplateError(f"step {index} (copy): mode {args[3][:16]!r} is no octal mode")
        mode = int(args[3], 8)
    found: list[CopyFile] = []
    total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as tar:
            for count, member in enumerate(tar):
                if count >= _MAX_MEMBERS:
                    raise TemplateError(f"step {index} (copy): more than {_MAX_MEMBERS} files")
                if not member.isreg():
                    continue
                name = member.name.lstrip("./")
                if name == src:
                    target = dest + posixpath.basename(name) if dest.endswith("/") else dest
                elif src and name.startswith(src + "/"):
                    target = dest.rstrip("/") + "/" + name[len(src) + 1 :]
                else:
                    target = dest.rstrip("/") + "/" + posixpath.basename(name)
                total += member.size
                if total > limit:
                    raise TemplateError(f"step {index} (copy): more than {limit} bytes")
                data = tar.extractfile(member)
                content = b"" if data is None else data.read(member.size)
                where = _home_path(target, f"step {index} (copy {src!r} to {dest!r})")
                found.append(CopyFile(where, content, member.mode if mode is None else mode))
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise TemplateError(f"step {index} (copy): the uploaded archive is unreadable") from exc
    return found
