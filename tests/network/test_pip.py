"""pip inside real sandboxes: from the operator's index through the sandbox's network, from
the wheelhouse with no network at all, and a clear failure when neither has the package; a
template built online, its build reaching the index and nothing else.

What pip installs goes to the sandbox's own prefix (``/work/.local``): importable in the
same cell and the next, and gone with the session.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from corral._limits import Limits
from corral.engine import BuildLog, Engine, PackageSources, build_network, build_template
from corral.errors import TemplateBuildFailed
from corral.network import Egress
from corral.templates import Pip, Run, TemplateSpec, TemplateStore
from tests.network.conftest import ceiling_for
from tests.network.internet import Internet

pytestmark = [pytest.mark.anyio, pytest.mark.isolation]

LIMITS = Limits(timeout=60)  # pip's own start is a second or two
IMPORT = "import corral_test_pkg\nprint(corral_test_pkg.VALUE, corral_test_pkg.__file__)"


@pytest.fixture(scope="module")
async def index_engine(internet: Internet) -> AsyncIterator[Engine]:
    """An engine whose pip uses the stand-in's index (plain http, trusted as named)."""
    packages = PackageSources(index_url="http://pypi.test/simple")
    egress = Egress(ceiling_for(internet))
    async with Engine(capacity=2, limits=LIMITS, egress=egress, packages=packages) as engine:
        yield engine


@pytest.fixture(scope="module")
async def offline_engine(internet: Internet) -> AsyncIterator[Engine]:
    """No network at all; the wheelhouse only."""
    packages = PackageSources(index_url="", wheelhouse=str(internet.wheelhouse))
    async with Engine(capacity=1, limits=LIMITS, packages=packages) as engine:
        yield engine


async def test_bang_pip_installs_from_the_index_and_imports_in_the_same_cell(
    index_engine: Engine,
) -> None:
    ceiling = index_engine.network_ceiling
    assert ceiling is not None
    async with await index_engine.open_session(network=ceiling.subset(["pypi.test"])) as session:
        first = await session.run("!pip install -q corral_test_pkg\n" + IMPORT)
        again = await session.run(IMPORT)
    assert first.outcome == "ok", first.stdout + first.stderr
    assert first.stdout.splitlines()[-1].startswith("42 /work/.local/lib/python")
    assert again.stdout.startswith("42 ")


async def test_percent_pip_and_a_subprocess_pip_install_into_the_session(
    index_engine: Engine,
) -> None:
    ceiling = index_engine.network_ceiling
    assert ceiling is not None
    async with await index_engine.open_session(network=ceiling.subset(["pypi.test"])) as session:
        magic = await session.run("%pip install -q corral_test_pkg")
        imported = await session.run(IMPORT)
    assert magic.outcome == "ok", magic.stdout + magic.stderr
    assert imported.stdout.startswith("42 ")
    async with await index_engine.open_session(network=ceiling.subset(["pypi.test"])) as session:
        shell = await session.run(
            "import subprocess\n"
            "done = subprocess.run(['pip', 'install', '-q', 'corral_test_pkg'])\n"
            "print(done.returncode)"
        )
        imported = await session.run(IMPORT)
    assert shell.stdout == "0\n", shell.stderr
    assert imported.stdout.startswith("42 ")


async def test_installed_packages_go_with_their_session(index_engine: Engine) -> None:
    ceiling = index_engine.network_ceiling
    assert ceiling is not None
    async with await index_engine.open_session(network=ceiling.subset(["pypi.test"])) as session:
        installed = await session.run("!pip install -q corral_test_pkg\n" + IMPORT)
    assert installed.stdout.splitlines()[-1].startswith("42 ")
    async with await index_engine.open_session() as session:
        fresh = await session.run(IMPORT)
    assert fresh.outcome == "python_error"
    assert fresh.error is not None
    assert fresh.error.type == "ModuleNotFoundError"


async def test_the_wheelhouse_serves_pip_with_no_network(offline_engine: Engine) -> None:
    async with await offline_engine.open_session() as session:
        result = await session.run("!pip install -q corral_test_pkg\n" + IMPORT)
    assert result.outcome == "ok", result.stdout + result.stderr
    assert result.stdout.splitlines()[-1].startswith("42 ")


async def test_a_package_that_is_nowhere_fails_with_pips_own_message(
    offline_engine: Engine,
) -> None:
    result = await offline_engine.run(
        "import subprocess\n"
        "done = subprocess.run(['pip', 'install', 'corral-nowhere-to-be-found'],"
        " capture_output=True, text=True)\n"
        "print(done.returncode)\nprint(done.stderr)"
    )
    assert result.stdout.splitlines()[0] == "1"
    assert "No matching distribution found for corral-nowhere-to-be-found" in result.stdout


async def test_without_a_network_the_index_is_not_reached(index_engine: Engine) -> None:
    result = await index_engine.run(
        "import subprocess\n"
        "done = subprocess.run(['pip', 'install', 'corral_test_pkg'],"
        " capture_output=True, text=True)\n"
        "print(done.returncode)\nprint(done.stderr)"
    )
    assert result.stdout.splitlines()[0] == "1"
    assert "No matching distribution found for corral_test_pkg" in result.stdout


@pytest.fixture(scope="module")
async def template_engine(
    internet: Internet, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Engine]:
    """The stand-in's index and no wheelhouse: a template's pip must go online."""
    packages = PackageSources(index_url="http://pypi.test/simple")
    egress = Egress(ceiling_for(internet))
    store = TemplateStore(tmp_path_factory.mktemp("online-templates"))
    async with Engine(
        capacity=2, limits=LIMITS, egress=egress, packages=packages, templates=store
    ) as engine:
        yield engine


async def test_a_template_builds_online_from_the_index_and_reaches_nothing_else(
    template_engine: Engine,
) -> None:
    network = build_network(template_engine, "pypi.test")
    assert network.enabled
    store = template_engine.templates.store
    spec = TemplateSpec(steps=(Pip(("corral_test_pkg",)),))
    log = BuildLog()
    await build_template(template_engine, store, "online", spec, owner="", log=log, network=network)
    result = await template_engine.run(IMPORT, template="online")
    assert result.outcome == "ok", result.error
    assert result.stdout.startswith("42 ")
    # The build's network is the index's host alone: another host the ceiling allows is shut.
    reach_out = "import urllib.request as u; u.urlopen('http://example.test/', timeout=10)"
    elsewhere = TemplateSpec(steps=(Run(f'python -c "{reach_out}"'),))
    failed = BuildLog()
    with pytest.raises(TemplateBuildFailed):
        await build_template(
            template_engine, store, "reaching-out", elsewhere, owner="", log=failed,
            network=network,
        )  # fmt: skip
    said = "\n".join(line.message for line in failed.lines)
    assert "URLError" in said or "Connection refused" in said, said
