"""Templates: named runtimes built once (pip packages, files, envs, a working folder, build
commands, a preload list), stored in the data folder, each with its own zygote.

This package is what a template is and where it is kept; the build (a session of the engine)
is ``corral.engine.build_template``, the zygotes ``corral.engine``'s own."""

from corral.templates._spec import (
    BASES,
    MAX_COPY_BYTES,
    CopyFile,
    Env,
    Pip,
    Run,
    Step,
    TemplateSpec,
    Workdir,
    check_name,
    describe,
    home_path,
)
from corral.templates._store import OPERATOR, Template, TemplateStore

__all__ = [
    "BASES",
    "MAX_COPY_BYTES",
    "OPERATOR",
    "CopyFile",
    "Env",
    "Pip",
    "Run",
    "Step",
    "Template",
    "TemplateSpec",
    "TemplateStore",
    "Workdir",
    "check_name",
    "describe",
    "home_path",
]
