"""The README's first example: one fresh, isolated run through the Python API."""

import anyio

import corral


async def main() -> None:
    async with corral.Engine() as engine:
        result = await engine.run("print(6 * 7)", limits=corral.Limits(timeout=5))
        print(result.outcome, result.stdout, end="")  # ok 42


anyio.run(main)
