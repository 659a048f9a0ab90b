"""A small Chrome DevTools Protocol client: headless Debian chromium, one page, over websockets.

Only what the playground test needs: navigate, evaluate (awaiting promises), type text.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import websockets
from anyio.abc import ByteReceiveStream
from anyio.streams.text import TextReceiveStream

__all__ = ["BROWSER", "Page", "browser_page"]

BROWSER = shutil.which("chromium")
START_BOUND = 60.0  # seconds for chromium to open its DevTools port
CALL_BOUND = 60.0  # seconds for one DevTools call (a run inside it included)
STOP_BOUND = 10.0  # seconds chromium gets to exit after SIGTERM
GROUP_POLL = 0.01  # seconds between checks that chromium's helpers are gone (the kernel has
# no event for a process group emptying)


class Page:
    """One page target."""

    def __init__(self, socket: Any) -> None:
        self._socket = socket
        self._ids = itertools.count(1)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self._ids)
        await self._socket.send(json.dumps({"id": ident, "method": method, "params": params}))
        with anyio.fail_after(CALL_BOUND):
            while True:
                message = json.loads(await self._socket.recv())
                if message.get("id") == ident:
                    if "error" in message:
                        raise RuntimeError(f"{method}: {message['error']}")
                    result: dict[str, Any] = message["result"]
                    return result

    async def evaluate(self, expression: str) -> Any:
        """The JSON value of ``expression`` (a promise is awaited)."""
        answer = await self.call(
            "Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True
        )
        if "exceptionDetails" in answer:
            raise RuntimeError(answer["exceptionDetails"])
        return answer["result"].get("value")

    async def navigate(self, url: str, *, bypass_csp: bool = False) -> None:
        """Load ``url``; ``bypass_csp`` lets the test's own scripts read blob: URLs."""
        await self.call("Page.enable")
        await self.call("Page.setBypassCSP", enabled=bypass_csp)
        await self.call("Page.navigate", url=url)
        await self.evaluate(
            "new Promise(r => document.readyState === 'complete' ? r() :"
            " addEventListener('load', () => r()))"
        )

    async def choose_file(self, selector: str, path: str) -> None:
        """Pick ``path`` in the file input ``selector``, as a user would in the dialog."""
        root = (await self.call("DOM.getDocument"))["root"]["nodeId"]
        node = (await self.call("DOM.querySelector", nodeId=root, selector=selector))["nodeId"]
        await self.call("DOM.setFileInputFiles", files=[path], nodeId=node)

    async def type(self, selector: str, text: str) -> None:
        """Focus ``selector`` and type ``text`` as keyboard input."""
        await self.evaluate(f"document.querySelector({json.dumps(selector)}).focus()")
        await self.call("Input.insertText", text=text)


async def _devtools_port(lines: AsyncIterator[str]) -> int:
    with anyio.fail_after(START_BOUND):
        async for text in lines:
            if "DevTools listening on ws://" in text:
                return int(text.split("ws://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
    raise RuntimeError("chromium exited before it opened its DevTools port")


async def _lines(stream: ByteReceiveStream) -> AsyncIterator[str]:
    pending = ""
    async for chunk in TextReceiveStream(stream, errors="replace"):
        pending += chunk
        *complete, pending = pending.split("\n")
        for line in complete:
            yield line


async def _drain(lines: AsyncIterator[str]) -> None:
    async for _ in lines:  # chromium keeps logging; a full pipe would stall it
        pass


async def _end_group(group: int) -> None:
    """Kill what is left of chromium's process group and wait until none of it is alive."""
    with anyio.move_on_after(STOP_BOUND, shield=True):
        while True:
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                return
            await anyio.sleep(GROUP_POLL)


@contextlib.asynccontextmanager
async def browser_page() -> AsyncIterator[Page]:
    """A headless chromium page; the browser is stopped on the way out."""
    assert BROWSER is not None
    with tempfile.TemporaryDirectory(prefix="corral-chromium-") as profile:
        command = [
            BROWSER,
            "--headless=new",
            "--no-sandbox",  # we run as root; chromium's own sandbox refuses to start then
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--disable-background-networking",
            f"--user-data-dir={profile}",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            "about:blank",
        ]
        # Its own process group: chromium's helpers (zygote, renderers) outlive the browser
        # for a moment and keep writing to the profile, which must be gone before cleanup.
        async with await anyio.open_process(
            command, stdout=subprocess.DEVNULL, start_new_session=True
        ) as process:
            assert process.stderr is not None
            lines = _lines(process.stderr)
            try:
                port = await _devtools_port(lines)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_drain, lines)
                    async with httpx.AsyncClient() as http:
                        targets = (await http.get(f"http://127.0.0.1:{port}/json/list")).json()
                    page = next(t for t in targets if t["type"] == "page")
                    url = page["webSocketDebuggerUrl"]
                    async with websockets.connect(url, max_size=None) as socket:
                        yield Page(socket)
                    tg.cancel_scope.cancel()
            finally:
                process.terminate()
                with anyio.move_on_after(STOP_BOUND, shield=True) as waited:
                    await process.wait()
                if waited.cancelled_caught:
                    process.kill()
                    with anyio.CancelScope(shield=True):
                        await process.wait()
                await _end_group(process.pid)
