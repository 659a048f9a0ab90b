"""E2B's charts: a matplotlib figure's data as ``result.chart``, beside its PNG.

E2B's code interpreter registers an IPython formatter of its own type, ``e2b/chart``, whose
value for a figure is what E2B's ``e2b-charts`` package extracts (its type, title, axes,
elements). An E2B sandbox's interpreter asks for the same (``install``, called by the E2B
front end's preparation); every other run's bundles stay as they are. A figure the package
cannot read adds no chart, never an error.
"""

from __future__ import annotations

from typing import Any

from corral._mime import E2B_CHART
from corral.sandbox.inside._cell import Display

__all__ = ["install"]


def _chart(figure: Any) -> dict[str, Any] | None:
    try:
        from e2b_charts import chart_figure_to_chart
    except ImportError:
        return None
    try:
        chart = chart_figure_to_chart(figure)
        found: dict[str, Any] = {} if chart is None else chart.model_dump(mode="json")
    except Exception:  # noqa: BLE001 - a figure it cannot read: no chart, as on E2B
        return None
    return found or None


def install(display: Display) -> None:
    """Add the ``e2b/chart`` format to ``display``'s formatter (once)."""
    if display.formatter is None and display.load_formatter is not None:
        display.load_formatter()
    formatters = display.formatter.formatters
    if E2B_CHART in formatters:
        return
    from IPython.core.formatters import BaseFormatter
    from matplotlib.figure import Figure
    from traitlets import ObjectName, Unicode

    class ChartFormatter(BaseFormatter):
        format_type = Unicode(E2B_CHART)
        print_method = ObjectName("_repr_e2b_chart_")
        _return_type = (dict,)  # a chart is data, not text

    chart = ChartFormatter(parent=display.formatter)
    chart.for_type(Figure, _chart)  # type: ignore[no-untyped-call]
    formatters[E2B_CHART] = chart
