"""The playground at GET /, in a real headless browser (Debian's chromium over DevTools) over
the real sandbox; the page itself, on the sandbox's in-process twin."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi import FastAPI

from corral._config import Config
from corral.engine import Engine
from corral.http import create_app
from tests.http.cdp import BROWSER, Page, browser_page
from tests.http.httpkit import ALICE, client_for
from tests.http.livekit import live

pytestmark = [pytest.mark.anyio, pytest.mark.network]

needs_browser = pytest.mark.skipif(
    BROWSER is None, reason="Debian's chromium is not installed (.ci/run installs it with apt-get)"
)

WAIT_FOR_OUTCOME = """
new Promise(resolve => {
  const box = document.getElementById("outcome");
  const done = () => /ms$|:/.test(box.textContent) && !document.getElementById("run").disabled;
  if (done()) return resolve(box.textContent);
  const watch = {subtree: true, childList: true, characterData: true, attributes: true};
  new MutationObserver(() => done() && resolve(box.textContent)).observe(document.body, watch);
})
"""


async def test_the_page_is_self_contained(gateway_app: FastAPI) -> None:
    async with client_for(gateway_app) as anonymous:
        page = await anonymous.get("/")
    assert page.status_code == 200
    assert "https://" not in page.text
    assert "http://" not in page.text
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy
    assert "'unsafe-inline'" not in policy.split("script-src", 1)[1].split(";", 1)[0]
    assert 'setAttribute("sandbox", "")' in page.text
    assert "innerHTML" not in page.text


async def _run(page: Page, code: str) -> str:
    await page.evaluate("document.getElementById('code').value = ''")
    await page.type("#code", code)
    await page.evaluate("document.getElementById('run').click()")
    outcome = await page.evaluate(WAIT_FOR_OUTCOME)
    return str(outcome)


@needs_browser
async def test_type_run_and_see_output_and_a_plot(real_gateway_app: FastAPI) -> None:
    async with live(real_gateway_app) as base_url, browser_page() as page:
        # The page's policy lets it fetch nothing but corral; the test reads the download link.
        await page.navigate(base_url + "/", bypass_csp=True)
        await page.type("#key", ALICE)
        assert await page.evaluate("sessionStorage.getItem('corral.key')") == ALICE
        code = (
            "import matplotlib.pyplot as plt\n"
            "print('hello from the sandbox')\n"
            "plt.plot([1, 4, 9])\n"
            "plt.show()\n"
            "open('out.txt', 'w').write('made')\n"
            "6 * 7"
        )
        outcome = await _run(page, code)
        assert outcome.startswith("ok"), outcome
        assert await page.evaluate("document.getElementById('stdout').textContent") == (
            "hello from the sandbox\n"
        )
        image = await page.evaluate(
            "(async () => { const img = document.querySelector('#display img');"
            " await img.decode(); return [img.src.slice(0, 22), img.naturalWidth]; })()"
        )
        assert image[0] == "data:image/png;base64,"
        assert image[1] > 100
        assert await page.evaluate("document.getElementById('result').textContent") == "42"
        assert await page.evaluate("document.getElementById('files').textContent") == (
            "out.txt (4 bytes)"
        )
        downloaded = await page.evaluate(
            "(async () => { const a = document.querySelector('#files a');"
            " return [a.download, await (await fetch(a.href)).text()]; })()"
        )
        assert downloaded == ["out.txt", "made"]


@needs_browser
async def test_html_from_user_code_cannot_script_the_page(real_gateway_app: FastAPI) -> None:
    async with live(real_gateway_app) as base_url, browser_page() as page:
        await page.navigate(base_url + "/")
        await page.type("#key", ALICE)
        attack = "<b id=x>bold</b><script>parent.document.title = 'owned'</script>"
        code = (
            "import pandas as pd\nfrom IPython.display import HTML, display\n"
            f"display(HTML({json.dumps(attack)}))\n"
            "pd.DataFrame({'a': [1, 2], 'b': [3, 4]})"
        )
        outcome = await _run(page, code)
        assert outcome.startswith("ok"), outcome
        frames = await page.evaluate(
            "[...document.querySelectorAll('iframe')].map(f => [f.getAttribute('sandbox'),"
            " f.srcdoc.includes('<table')])"
        )
        assert frames == [["", False], ["", True]]  # the HTML, then the DataFrame's table
        assert await page.evaluate("document.title") == "corral playground"
        assert await page.evaluate("document.querySelector('#x')") is None  # never injected


async def _files_once(page: Page, name: str) -> str:
    """The file list's text once it names ``name``."""
    found = await page.evaluate(
        "new Promise(r => { const f = document.getElementById('files');"
        f" const has = () => f.textContent.includes({json.dumps(name)});"
        " if (has()) return r(f.textContent);"
        " new MutationObserver(() => has() && r(f.textContent))"
        ".observe(f, {childList: true, subtree: true}); })"
    )
    return str(found)


@needs_browser
async def test_a_session_keeps_state_and_files(real_gateway_app: FastAPI, tmp_path: Path) -> None:
    async with live(real_gateway_app) as base_url, browser_page() as page:
        await page.navigate(base_url + "/")
        await page.type("#key", ALICE)
        await page.evaluate(
            "new Promise(r => { const s = document.getElementById('session');"
            " const label = document.getElementById('session-id');"
            " new MutationObserver(() => label.textContent && r()).observe(label,"
            " {childList: true, characterData: true, subtree: true}); s.click(); })"
        )
        assert (await _run(page, "n = 5")).startswith("ok")
        assert (await _run(page, "open('kept.txt', 'w').write('x' * n)\nn * 2")).startswith("ok")
        assert await page.evaluate("document.getElementById('result').textContent") == "10"
        assert await _files_once(page, "kept.txt") == "kept.txt (5 bytes)"
        upload = tmp_path / "mine.csv"
        upload.write_text("a\n1\n2\n")
        await page.choose_file("#upload", str(upload))
        assert await _files_once(page, "mine.csv") == "kept.txt (5 bytes)mine.csv (6 bytes)"
        code = "import pandas as pd\nint(pd.read_csv('mine.csv').a.sum()) + n"
        assert (await _run(page, code)).startswith("ok")
        assert await page.evaluate("document.getElementById('result').textContent") == "8"


async def test_the_playground_is_gateway_only(engine: Engine, container_config: Config) -> None:
    async with client_for(create_app(engine, container_config)) as container:
        assert (await container.get("/")).status_code == 404
