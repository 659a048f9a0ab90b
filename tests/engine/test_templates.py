"""Templates on a real engine: a build in a sandbox, its layer in every sandbox made from it
(one-shot runs, sessions, ``/v1/execute``), and the template zygotes' lifecycle."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from corral._config import ApiKey, Config
from corral._limits import Limits
from corral.engine import BuildLog, Engine, build_template
from corral.engine._packages import PackageSources
from corral.errors import Busy, TemplateBuildFailed, TemplateError, TemplateNotFound
from corral.http import create_app
from corral.templates import (
    CopyFile,
    Env,
    Pip,
    Run,
    TemplateSpec,
    TemplateStore,
    Workdir,
    home_path,
)
from tests.http.httpkit import client_for
from tests.network.internet import build_wheel

pytestmark = [pytest.mark.anyio, pytest.mark.isolation]

LIMITS = Limits(timeout=60)
IDLE = 1.0  # seconds a template zygote may idle here before it is closed
WAIT = 30.0  # seconds a bounded poll waits for a zygote to close
DISK = 64 << 20  # bytes of a session's folder, and so of a build's layer
_KEYS = (ApiKey(key="alice-key", user="alice", roles=("coder",)),)

SPEC = TemplateSpec(
    steps=(
        Env((("TPL_COLOUR", "teal"),)),
        Pip(("corral_test_pkg",)),
        CopyFile("data/table.csv", b"a,b\n1,2\n"),
        Run("echo made-by-run > made.txt"),
        Workdir("data"),
    )
)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("templates-data")


@pytest.fixture(scope="module")
async def engine(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> AsyncIterator[Engine]:
    wheels = tmp_path_factory.mktemp("templates-wheels")
    wheels.chmod(0o755)  # the sandbox's uid reads it
    build_wheel(wheels).chmod(0o644)
    async with Engine(
        capacity=2, limits=LIMITS, pool_size=1,
        packages=PackageSources(index_url="", wheelhouse=str(wheels)),
        templates=TemplateStore(data_dir), template_zygotes=2, template_idle_timeout=IDLE,
        session_disk_bytes=DISK,
    ) as started:  # fmt: skip
        await build_template(
            started, started.templates.store, "alpha", SPEC, owner="", log=BuildLog()
        )
        yield started


async def test_a_run_from_a_template_sees_its_layer(engine: Engine) -> None:
    result = await engine.run(
        "import corral_test_pkg, os\n"
        "print(corral_test_pkg.VALUE, os.environ['TPL_COLOUR'], os.getcwd())\n"
        "print(open('table.csv').read(), open('../made.txt').read())",
        template="alpha",
    )
    assert result.outcome == "ok", result.error
    assert result.stdout == "42 teal /work/data\na,b\n1,2\n made-by-run\n\n"
    assert result.files == ()  # the template's own files are not the run's


async def test_a_default_run_does_not_see_a_templates_package(engine: Engine) -> None:
    result = await engine.run("import corral_test_pkg")
    assert result.outcome == "python_error"
    assert result.error is not None
    assert result.error.type == "ModuleNotFoundError"


async def test_the_layer_is_read_only(engine: Engine) -> None:
    result = await engine.run(
        "import corral_test_pkg, os\n"
        "assert os.getuid() == 1000\n"  # proven inside the sandbox before it tries
        "mounts = open('/proc/self/mountinfo').read().splitlines()\n"
        "print([m.split()[5] for m in mounts if ' /opt/corral/template ' in m])\n"
        "open(corral_test_pkg.__file__, 'a')",
        template="alpha",
    )
    assert result.stdout.startswith("['ro,")  # a read-only mount
    assert result.error is not None
    assert result.error.type == "PermissionError"


async def test_a_session_from_a_template_has_its_files_in_its_folder(engine: Engine) -> None:
    async with await engine.open_session(template="alpha") as session:
        result = await session.run(
            "import corral_test_pkg, os\nprint(corral_test_pkg.VALUE, os.getcwd())\n"
            "open('table.csv', 'a').write('3,4\\n')\nprint(open('table.csv').read())"
        )
        assert result.outcome == "ok", result.error
        assert result.stdout == "42 /mnt/data/data\na,b\n1,2\n3,4\n\n"
        assert await session.files.get("made.txt") == b"made-by-run\n"


async def test_unknown_and_other_owners_templates_are_not_found(engine: Engine) -> None:
    with pytest.raises(TemplateNotFound, match="'nope'"):
        await engine.run("1", template="nope")
    store = engine.templates.store
    await build_template(
        engine, store, "bobs", TemplateSpec(base="base"), owner="bob", log=BuildLog()
    )
    assert (await engine.run("1", template="bobs", tenant="bob")).outcome == "ok"
    with pytest.raises(TemplateNotFound):
        await engine.run("1", template="bobs", tenant="alice")
    with pytest.raises(TemplateError, match="another owner"):
        await build_template(engine, store, "bobs", TemplateSpec(), owner="alice", log=BuildLog())
    with pytest.raises(TemplateError, match="outside the sandbox's home"):
        home_path("/etc/passwd", "copy")


async def test_a_failing_step_fails_the_build_with_its_log(engine: Engine) -> None:
    log = BuildLog()
    spec = TemplateSpec(base="base", steps=(Run("echo before the end; exit 3"),))
    with pytest.raises(TemplateBuildFailed, match="status 3") as failed:
        await build_template(engine, engine.templates.store, "broken", spec, owner="", log=log)
    assert "before the end" in failed.value.log
    assert any(line.level == "error" for line in log.lines)
    assert engine.templates.store.find("broken") is None


async def test_a_build_is_bounded_in_time_and_disk(engine: Engine) -> None:
    store = engine.templates.store
    slow = TemplateSpec(base="base", steps=(Run("sleep 60"),))
    with pytest.raises(TemplateBuildFailed, match=r"ran out of time|exceeded its 2 s"):
        await build_template(engine, store, "slow", slow, owner="", log=BuildLog(), seconds=2)
    half = DISK // 2 + (1 << 20)  # two files past the quota, each under the file size limit
    fill = f"head -c {half} /dev/zero > a && head -c {half} /dev/zero > b"
    big = TemplateSpec(base="base", steps=(Run(fill),))
    with pytest.raises(TemplateBuildFailed, match="step 1 failed") as failed:
        await build_template(engine, store, "big", big, owner="", log=BuildLog())
    assert "No space left on device" in failed.value.log
    assert store.find("slow") is None
    assert store.find("big") is None
    # Sparse files claim more than the build's disk: the server copies at most that disk's
    # worth into the layer, whatever the sandbox's files say they hold.
    sparse = (
        f"mkdir -p $PYTHONPATH && for i in 1 2 3 4 5; do truncate -s {half} $PYTHONPATH/f$i; done"
    )
    claimed = TemplateSpec(base="base", steps=(Run(sparse),))
    with pytest.raises(TemplateBuildFailed, match="more than its"):
        await build_template(engine, store, "sparse", claimed, owner="", log=BuildLog())
    assert store.find("sparse") is None


async def test_execute_names_a_template(engine: Engine, data_dir: Path) -> None:
    app = create_app(engine, Config(mode="gateway", data_dir=data_dir, api_keys=_KEYS))
    async with client_for(app, "alice-key") as client:
        done = await client.post(
            "/v1/execute",
            json={"code": "import corral_test_pkg\ncorral_test_pkg.VALUE", "template": "alpha"},
        )
        assert done.status_code == 200
        assert done.json()["result"] == {"text/plain": "42"}
        missing = await client.post("/v1/execute", json={"code": "1", "template": "nope"})
        assert missing.status_code == 404
        assert "'nope'" in missing.text
        assert "template" in missing.text
        opened = await client.post(
            "/v1/ops/code_interpreter/open_session", json={"template": "alpha"}
        )
        assert opened.status_code == 200
        sid = opened.json()["sessionId"]
        in_session = await client.post(
            "/v1/execute", json={"code": "import corral_test_pkg", "sessionId": sid}
        )
        assert in_session.json()["status"] == "SUCCESS"
        both = await client.post(
            "/v1/execute", json={"code": "1", "sessionId": sid, "template": "alpha"}
        )
        assert both.status_code == 422
        await client.post("/v1/ops/code_interpreter/close_session", json={"sessionId": sid})


async def test_two_template_zygotes_and_the_idle_one_closes(engine: Engine) -> None:
    store = engine.templates.store
    await build_template(engine, store, "beta", TemplateSpec(base="base"), owner="", log=BuildLog())
    async with await engine.open_session(template="alpha"):
        assert (await engine.run("1", template="beta")).outcome == "ok"
        assert set(engine.templates.live()) == {"alpha", "beta"}
        with anyio.fail_after(WAIT):
            while "beta" in engine.templates.live():  # noqa: ASYNC110 - a periodic sweep
                await anyio.sleep(0.1)  # a bounded poll: the idle check runs every IDLE / 4 s
        assert set(engine.templates.live()) == {"alpha"}  # a live session keeps its zygote
    assert (await engine.run("import corral_test_pkg", template="alpha")).outcome == "ok"


async def test_at_most_max_live_zygotes_the_least_recently_used_idle_one_goes(
    engine: Engine,
) -> None:
    engine.templates.idle_timeout = 600.0  # nothing closes for idling during this test
    try:
        async with (
            await engine.open_session(template="alpha"),
            await engine.open_session(template="beta"),
        ):
            with pytest.raises(Busy, match="2 templates are in use"):
                await engine.run("1", template="bobs", tenant="bob")
        assert set(engine.templates.live()) == {"alpha", "beta"}
        assert (await engine.run("1", template="alpha")).outcome == "ok"  # beta is the older
        assert (await engine.run("1", template="bobs", tenant="bob")).outcome == "ok"
        assert set(engine.templates.live()) == {"alpha", "bobs"}
    finally:
        engine.templates.idle_timeout = IDLE


def _module_step(value: int) -> Run:
    """A step that writes a module into the layer's packages (PYTHONPATH is the prefix's)."""
    return Run(f"mkdir -p $PYTHONPATH && echo 'V = {value}' > $PYTHONPATH/gammamod.py")


async def test_a_rebuilt_template_serves_new_sandboxes_and_keeps_the_old_ones_layer(
    engine: Engine,
) -> None:
    store = engine.templates.store
    first = TemplateSpec(base="base", steps=(_module_step(1),))
    await build_template(engine, store, "gamma", first, owner="", log=BuildLog())
    session = await engine.open_session(template="gamma")
    old = store.get("gamma").layer
    # Built two days ago: replacing it now must not count its age from its build.
    two_days_ago = time.time() - 2 * 24 * 3600
    os.utime(old, (two_days_ago, two_days_ago))
    second = TemplateSpec(base="base", steps=(_module_step(2),))
    await build_template(engine, store, "gamma", second, owner="", log=BuildLog())
    try:
        fresh = await engine.run("import gammamod; gammamod.V", template="gamma")
        assert fresh.result == {"text/plain": "2"}
        kept = await session.run("import gammamod; gammamod.V")
        assert kept.result == {"text/plain": "1"}  # its layer is still there for it
        assert old.is_dir()
    finally:
        await session.close()
    with anyio.fail_after(WAIT):
        while old.exists():  # noqa: ASYNC110 - the old zygote closes at the next sweep
            await anyio.sleep(0.1)
    assert store.get("gamma").layer.is_dir()
