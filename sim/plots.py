"""PNG figures for reports: one way to open a figure, label an axes and write the file.

Used by the paper reproductions (``sim/reproduce``) and the validation reports (``real/``).
Figures are plain :class:`matplotlib.figure.Figure` objects, never registered with pyplot: no
backend switch, no global list of open figures to close, and PNG output through Agg regardless of
the session's backend. Matplotlib is imported inside the functions so that importing a module
that draws plots (and ``hetspec platforms``) stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

DEFAULT_DPI = 110        # the resolution most report figures were first drawn at (alspec's and llmcad's: 120)
GRID_ALPHA = 0.3         # a light grid that does not compete with the data lines
LEGEND_FONTSIZE = 7      # the size most report legends use: small enough for 5-8 entries inside the axes


def new_figure(rows: int = 1, cols: int = 1, *, figsize: tuple[float, float], layout: str | None = None,
               **subplots_kw: Any) -> tuple[Any, Any]:
    """A figure and its axes, as ``plt.subplots(rows, cols, figsize=...)`` returns them (one axes when 1 x 1).

    ``layout="constrained"`` lets matplotlib place the axes; otherwise :func:`save_figure` applies
    ``tight_layout``. ``subplots_kw`` goes to ``Figure.subplots`` (``sharey``, ``squeeze``).
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout=layout)
    return fig, fig.subplots(rows, cols, **subplots_kw)


def finish_axes(ax: Any, *, title: str | None = None, xlabel: str | None = None, ylabel: str | None = None,
                legend_fontsize: float | str | None = LEGEND_FONTSIZE, grid: str | None = "both") -> None:
    """Labels and title (those given), the light grid on the ``grid`` axes ("x", "y", "both"; None: no grid),
    and a legend of the labelled artists at ``legend_fontsize`` (None: no legend)."""
    if xlabel is not None:
        ax.set_xlabel(xlabel)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    if title is not None:
        ax.set_title(title)
    if grid is not None:
        ax.grid(alpha=GRID_ALPHA, axis=grid)
    if legend_fontsize is not None:
        ax.legend(fontsize=legend_fontsize)


def save_figure(fig: Any, path: Path, *, dpi: int = DEFAULT_DPI,
                rect: tuple[float, float, float, float] | None = None) -> Path:
    """Lay out (``tight_layout`` within ``rect``, unless the figure has its own layout) and write ``path``."""
    from hwmodels.atomic_files import atomic_path
    from hwmodels.datafile import writing

    if fig.get_layout_engine() is None:
        fig.tight_layout(rect=rect)
    with writing(path, "figure"), atomic_path(path) as temp:
        fig.savefig(temp, dpi=dpi, format=Path(path).suffix.lstrip(".") or None)
    return Path(path)
