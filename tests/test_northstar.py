"""The Northstar path end to end (docs/code-interpreter.md §10): XLSX attachment, shared
ingestion, an invocation-local id, an isolated worker copy, a Python calculation, 8.25 hours
with evidence.
"""

from __future__ import annotations

import hashlib
import pathlib
from collections.abc import AsyncIterator

import anyio
import pytest

from corral import Limits
from corral.engine import Engine
from corral.tools import (
    CODE_INTERPRETER,
    Invocation,
    ToolContext,
    ToolRegistry,
    register_code_interpreter,
)

pytestmark = [pytest.mark.anyio, pytest.mark.isolation]

WORKBOOK = pathlib.Path(__file__).resolve().parent.parent / "examples" / "northstar.xlsx"


@pytest.fixture(scope="module")
async def engine() -> AsyncIterator[Engine]:
    async with Engine(capacity=1, limits=Limits(timeout=30)) as started:
        yield started


def _code(source_id: str) -> str:
    # Reads the mounted canonical text, cross-checks it against the original bytes with
    # openpyxl, and states count, units and missing-value policy (docs/code-interpreter.md §10).
    return f"""
import csv, io
import openpyxl
from corral.numeric import mean

text = open(input_files[{source_id!r}]).read()
rows = [r for r in csv.reader(io.StringIO(text)) if r and not r[0].startswith("# sheet")]
header, *records = rows
column = header.index("Measured runtime (hours)")
measured_runtime_hours = [float(r[column]) for r in records]

original = open(input_assets[{source_id!r}]["original"], "rb").read()
book = openpyxl.load_workbook(io.BytesIO(original), data_only=True)
cells = [row[1] for row in book["Runtime"].iter_rows(min_row=2, values_only=True)]
assert cells == measured_runtime_hours, (cells, measured_runtime_hours)

aggregate = mean(measured_runtime_hours, missing="reject")
print(f"n={{aggregate.n}} missing={{aggregate.n_missing}} policy={{aggregate.policy}} units=hours")
aggregate.value
"""


async def test_northstar_mean_is_8_25_hours_with_its_evidence(engine: Engine) -> None:
    data = WORKBOOK.read_bytes()
    async with Invocation() as invocation:
        registry = ToolRegistry()
        register_code_interpreter(registry, engine, invocation)
        source = invocation.sources.add_attachment(data, WORKBOOK.name)
        assert source.kind == "attachment"
        assert source.text == (
            b"# sheet: Runtime\nPrototype,Measured runtime (hours)\n"
            b"Prototype A,9\nPrototype B,7.5\n"
        )
        code = _code(source.id)
        with anyio.fail_after(60):
            result = await registry.call(
                CODE_INTERPRETER,
                {
                    "summary": "Mean measured runtime of the Northstar prototypes",
                    "code": code,
                    "sourceIds": [source.id],
                },
                ToolContext(invocation=invocation),
            )
    assert not result.is_error, result.text
    execution = result.structured
    assert execution is not None
    assert execution["result"] == {"text/plain": "8.25"}
    assert execution["stdout"] == "n=2 missing=0 policy=reject units=hours\n"
    assert "--- result ---\n8.25" in result.text

    evidence = execution["evidence"]
    assert evidence["inputs"] == [
        {
            "id": source.id,
            "sha256": hashlib.sha256(source.text).hexdigest(),
            "original_sha256": hashlib.sha256(data).hexdigest(),
        }
    ]
    assert evidence["code_sha256"] == hashlib.sha256(code.encode()).hexdigest()
    assert "python 3." in evidence["runtime"]
    assert evidence["limits"]["timeout"] == 30.0
    assert evidence["limits"]["output_chars"] == 64_000
    assert evidence["limits"]["max_sources"] == 4
    # The persisted record keeps the digests, not the id or the workbook's name.
    assert result.details["evidence"]["input_sha256"] == [source.text_sha256]
    assert source.id not in str(result.details)
    assert WORKBOOK.name not in str(result.details)


async def test_the_seed_calculation_runs_as_written(engine: Engine) -> None:
    code = (
        "measured_runtime_hours = [9.0, 7.5]\n"
        "assert all(isinstance(value, (int, float)) for value in measured_runtime_hours)\n"
        "mean_runtime_hours = sum(measured_runtime_hours) / len(measured_runtime_hours)\n"
        "mean_runtime_hours"
    )
    async with Invocation() as invocation:
        registry = ToolRegistry()
        register_code_interpreter(registry, engine, invocation)
        with anyio.fail_after(60):
            result = await registry.call(
                CODE_INTERPRETER,
                {"summary": "The Northstar mean runtime", "code": code},
                ToolContext(invocation=invocation),
            )
    assert result.structured is not None
    assert result.structured["result"] == {"text/plain": "8.25"}
    assert result.structured["evidence"]["inputs"] == []
