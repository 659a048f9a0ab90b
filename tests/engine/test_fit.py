"""Output fitting: exact omission counts, both bounds, bounded server memory.

The unit tests drive StreamFitter, render and fit_channels directly; the floods run code that
floods the engine's reader (on the sandbox's in-process twin) and check the same promises end
to end; the 200 MB print runs in a real worker, as its output must never be held in this
process.
"""

from __future__ import annotations

import resource
import time

import pytest

from corral._limits import Limits
from corral.engine import Engine, ExecutionResult
from corral.engine._fit import STREAM_CUT, StreamFitter, fit_channels, marker, render

# helpers -----------------------------------------------------------------------------------


def fitted(text: str, ceiling: int) -> tuple[str, str, int]:
    fitter = StreamFitter(ceiling)
    fitter.feed(text.encode())
    return fitter.finish()


def assert_fit(original: str, text: str, omitted: int, max_chars: int, max_bytes: int) -> None:
    """``text`` is a head and a tail of ``original`` around one exact marker, within bounds."""
    assert len(text) <= max_chars
    assert len(text.encode()) <= max_bytes
    if omitted == 0:
        assert text == original
        return
    cut = marker(omitted)
    assert text.count(cut) == 1
    head, tail = text.split(cut)
    assert original.startswith(head)
    assert original.endswith(tail)
    assert omitted == len(original) - len(head) - len(tail)


def kept(text: str, omitted: int) -> str:
    """The channel's own characters in a fitted text (the marker removed)."""
    return text.replace(marker(omitted), "") if omitted else text


# StreamFitter ------------------------------------------------------------------------------


def test_stream_fitter_keeps_everything_under_its_ceiling() -> None:
    assert fitted("hello\n", 10) == ("hello\n", "", 0)


def test_stream_fitter_keeps_a_head_and_a_tail_and_counts_the_rest() -> None:
    fitter = StreamFitter(4)
    for chunk in ("abc", "defgh", "ijklmnop", "q"):
        fitter.feed(chunk.encode())
    assert fitter.finish() == ("abcd", "nopq", 9)
    assert fitter.total == 17


def test_a_live_listener_is_told_once_where_streaming_stops() -> None:
    streamed: list[str] = []
    fitter = StreamFitter(10, streamed.append)
    fitter.feed(b"0123456")
    fitter.feed(b"789abc")  # the head fills at "9"
    fitter.feed(b"defgh")
    assert streamed == ["0123456", "789", STREAM_CUT]
    head, tail, _ = fitter.finish()
    assert STREAM_CUT not in head + tail  # the result marks its own cut


def test_a_listener_under_the_ceiling_hears_no_cut() -> None:
    streamed: list[str] = []
    fitter = StreamFitter(10, streamed.append)
    fitter.feed(b"0123456789")
    assert streamed == ["0123456789"]


def test_stream_fitter_memory_is_bounded_by_its_ceiling() -> None:
    fitter = StreamFitter(100)
    chunk = b"0123456789" * 6553
    for _ in range(200):
        fitter.feed(chunk)
    head, tail, dropped = fitter.finish()
    assert (len(head), len(tail)) == (100, 100)
    assert dropped == 200 * len(chunk) - 200
    assert fitter.total == 200 * len(chunk)


def test_stream_fitter_decodes_characters_split_across_chunks() -> None:
    data = ("é中😀" * 3).encode()
    fitter = StreamFitter(100)
    for i in range(len(data)):
        fitter.feed(data[i : i + 1])
    assert fitter.finish() == ("é中😀" * 3, "", 0)


def test_stream_fitter_replaces_invalid_utf8() -> None:
    fitter = StreamFitter(100)
    fitter.feed(b"ok \xff\xfe done")
    head, _, _ = fitter.finish()
    assert head == "ok \ufffd\ufffd done"


def test_ansi_escapes_are_stripped() -> None:
    fitter = StreamFitter(100)
    fitter.feed(b"\x1b[1;31mred\x1b[0m \x1b]0;title\x07plain\x1b[2K\n")
    assert fitter.finish() == ("red plain\n", "", 0)
    assert fitter.total == len("red plain\n")


def test_csi_escapes_split_across_chunks_are_stripped() -> None:
    fitter = StreamFitter(100)
    for chunk in (b"\x1b[1;3", b"1mred\x1b", b"[0m plain\n"):
        fitter.feed(chunk)
    assert fitter.finish() == ("red plain\n", "", 0)


def test_osc_escapes_split_across_chunks_are_stripped() -> None:
    # A terminal-title sequence cut by a pipe read: its body must not leak into the text.
    fitter = StreamFitter(100)
    for chunk in (b"before \x1b]0;ti", b"tle\x07after\n"):
        fitter.feed(chunk)
    assert fitter.finish() == ("before after\n", "", 0)


def test_an_unterminated_escape_at_the_end_is_not_lost_silently() -> None:
    fitter = StreamFitter(100)
    fitter.feed(b"text \x1b[")
    head, _, dropped = fitter.finish()
    assert head.startswith("text ")
    assert dropped == 0


# render ------------------------------------------------------------------------------------


def test_render_returns_short_text_unchanged() -> None:
    assert render("abc", "", 0, 10, 100) == ("abc", 0)


@pytest.mark.parametrize("size", [101, 500, 10_000, 1_000_000])
@pytest.mark.parametrize("max_chars", [60, 100, 1000])
def test_render_cuts_to_the_character_ceiling_with_exact_counts(size: int, max_chars: int) -> None:
    original = "".join(chr(ord("a") + i % 26) for i in range(size))
    text, omitted = render(*fitted(original, max_chars), max_chars, 10**9)
    if size <= max_chars:
        assert (text, omitted) == (original, 0)
    else:
        assert omitted > 0
    assert_fit(original, text, omitted, max_chars, 10**9)


@pytest.mark.parametrize("char", ["é", "中", "😀"])
def test_render_respects_the_byte_bound_for_multibyte_text(char: str) -> None:
    original = char * 5000
    text, omitted = render(*fitted(original, 64_000), 64_000, 3000)
    assert omitted > 0
    assert_fit(original, text, omitted, 64_000, 3000)
    assert len(text.encode()) > 3000 - 200  # it uses the room it has


def test_render_says_nothing_rather_than_break_a_tiny_bound() -> None:
    original = "x" * 1000
    assert render(*fitted(original, 1000), 10, 10**6) == ("", 1000)
    assert render(*fitted(original, 1000), 1000, 5) == ("", 1000)


# fit_channels ------------------------------------------------------------------------------


def test_fit_channels_leaves_channels_that_fit_alone() -> None:
    channels = {"stdout": fitted("out\n", 100), "stderr": fitted("", 100)}
    assert fit_channels(channels, 100, 1000) == {"stdout": ("out\n", 0), "stderr": ("", 0)}


def test_fit_channels_respects_both_bounds_with_exact_counts() -> None:
    originals = {"stdout": "中" * 20_000, "stderr": "é" * 20_000, "result": "small"}
    max_chars, max_bytes = 10_000, 30_000
    result = fit_channels(
        {name: fitted(text, max_chars) for name, text in originals.items()}, max_chars, max_bytes
    )
    assert sum(len(text.encode()) for text, _ in result.values()) <= max_bytes
    for name, (text, omitted) in result.items():
        assert_fit(originals[name], text, omitted, max_chars, max_bytes)
    assert result["result"] == ("small", 0)  # a small channel keeps everything


def test_fit_channels_shares_the_byte_budget_fairly() -> None:
    originals = {"stdout": "a" * 50_000, "stderr": "b" * 50_000}
    result = fit_channels(
        {name: fitted(text, 64_000) for name, text in originals.items()}, 64_000, 20_000
    )
    sizes = [len(text.encode()) for text, _ in result.values()]
    assert sum(sizes) <= 20_000
    assert min(sizes) > 9_000  # neither channel starves the other
    for name, (text, omitted) in result.items():
        assert_fit(originals[name], text, omitted, 64_000, 20_000)


# floods -------------------------------------------------------------------------------


def _ok(result: ExecutionResult) -> ExecutionResult:
    assert result.outcome == "ok", (result.outcome, result.message, result.stderr[-2000:])
    return result


@pytest.mark.anyio
async def test_flood_is_fitted_with_exact_counts(engine: Engine) -> None:
    result = _ok(await engine.run("print('x' * 200_000)", limits=Limits(output_chars=1000)))
    assert len(result.stdout) <= 1000
    assert result.stdout.startswith("x")
    assert result.stdout.endswith("x\n")
    own = kept(result.stdout, result.omitted["stdout"])
    assert set(own) == {"x", "\n"}
    assert result.omitted == {"stdout": 200_001 - len(own), "stderr": 0, "result": 0}
    assert_fit("x" * 200_000 + "\n", result.stdout, result.omitted["stdout"], 1000, 10**9)


@pytest.mark.anyio
async def test_stderr_and_result_are_fitted_too(engine: Engine) -> None:
    result = _ok(
        await engine.run(
            "import sys\nsys.stderr.write('e' * 5000)\n'r' * 5000",
            limits=Limits(output_chars=500),
        )
    )
    assert_fit("e" * 5000, result.stderr, result.omitted["stderr"], 500, 10**9)
    assert result.result != ""
    plain = result.result["text/plain"]
    assert_fit(repr("r" * 5000), plain, result.omitted["result"], 500, 10**9)
    assert result.omitted["stderr"] > 0
    assert result.omitted["result"] > 0
    assert result.omitted["stdout"] == 0


@pytest.mark.anyio
@pytest.mark.parametrize("char", ["é", "中"])
async def test_multibyte_flood_against_the_character_ceiling(engine: Engine, char: str) -> None:
    result = _ok(
        await engine.run(f"print({char!r} * 50_000, end='')", limits=Limits(output_chars=2000))
    )
    original = char * 50_000
    assert "\ufffd" not in result.stdout  # characters split across pipe reads are rejoined
    assert_fit(original, result.stdout, result.omitted["stdout"], 2000, 10**9)
    assert result.omitted["stdout"] == 50_000 - kept(result.stdout, result.omitted["stdout"]).count(
        char
    )


@pytest.mark.anyio
@pytest.mark.parametrize("char", ["é", "中"])
async def test_multibyte_flood_against_the_byte_bound(engine: Engine, char: str) -> None:
    limits = Limits(output_chars=64_000, output_bytes=6000)
    result = _ok(
        await engine.run(
            f"import sys\nprint({char!r} * 30_000, end='')\nsys.stderr.write({char!r} * 30_000)",
            limits=limits,
        )
    )
    original = char * 30_000
    assert len(result.stdout.encode()) + len(result.stderr.encode()) <= 6000
    for channel in ("stdout", "stderr"):
        text = getattr(result, channel)
        omitted = result.omitted[channel]
        assert_fit(original, text, omitted, 64_000, 6000)
        assert omitted == 30_000 - kept(text, omitted).count(char)
        assert omitted > 0


@pytest.mark.anyio
@pytest.mark.isolation
async def test_a_200_mb_print_ends_on_time_with_bounded_server_memory(real_engine: Engine) -> None:
    size = 200 * 1024 * 1024
    before_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    result = _ok(
        await real_engine.run(
            "import sys\nchunk = 'y' * (1 << 20)\n"
            "for _ in range(200):\n    sys.stdout.write(chunk)",
            limits=Limits(timeout=20),
        )
    )
    assert time.perf_counter() - started < 20 + 2
    grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_kb
    assert grown_kb < 50 * 1024, f"the server's peak RSS grew by {grown_kb} kB"
    assert len(result.stdout) <= Limits().output_chars
    assert result.omitted["stdout"] == size - len(kept(result.stdout, result.omitted["stdout"]))
