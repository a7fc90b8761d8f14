"""sim.plots: figures outside pyplot, the axes finish, and the PNG written at the asked resolution."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.image import imread

from sim.plots import DEFAULT_DPI, GRID_ALPHA, finish_axes, new_figure, save_figure


def test_new_figure_returns_axes_like_subplots_and_leaves_pyplot_alone():
    before = plt.get_fignums()
    fig, ax = new_figure(figsize=(4, 3))
    assert ax.figure is fig and tuple(fig.get_size_inches()) == (4, 3)
    fig, axes = new_figure(1, 3, figsize=(6, 2), sharey=True)
    assert axes.shape == (3,) and axes[1].get_shared_y_axes().joined(axes[0], axes[1])
    _, grid = new_figure(1, 2, figsize=(6, 2), squeeze=False)
    assert grid.shape == (1, 2)
    assert plt.get_fignums() == before          # nothing to close: pyplot never saw these figures


def test_finish_axes_labels_grid_and_legend():
    _, ax = new_figure(figsize=(4, 3))
    ax.plot([0, 1], [0, 1], label="line")
    finish_axes(ax, title="t", xlabel="x", ylabel="y", legend_fontsize=9, grid="y")
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == ("t", "x", "y")
    assert ax.get_legend().get_texts()[0].get_fontsize() == 9
    assert all(g.get_visible() and g.get_alpha() == GRID_ALPHA for g in ax.yaxis.get_gridlines())
    assert not any(g.get_visible() for g in ax.xaxis.get_gridlines())

    _, bare = new_figure(figsize=(4, 3))
    bare.plot([0, 1], [0, 1], label="line")
    finish_axes(bare, title="only a title", legend_fontsize=None, grid=None)
    assert bare.get_legend() is None and bare.get_xlabel() == ""
    assert not any(g.get_visible() for g in bare.xaxis.get_gridlines() + bare.yaxis.get_gridlines())


def test_save_figure_writes_the_png_at_its_dpi_and_lays_out(tmp_path):
    fig, ax = new_figure(figsize=(4, 3))
    ax.set_ylabel("label", fontsize=30)
    default_x0 = ax.get_position().x0
    path = save_figure(fig, tmp_path / "a.png")
    assert path == tmp_path / "a.png"
    assert imread(path).shape[:2] == (3 * DEFAULT_DPI, 4 * DEFAULT_DPI)
    assert ax.get_position().x0 > default_x0         # tight_layout ran: the axes moved right of the large label
    fig, ax = new_figure(figsize=(4, 3))
    save_figure(fig, tmp_path / "b.png", dpi=50, rect=(0, 0.5, 1, 1))
    assert imread(tmp_path / "b.png").shape[:2] == (150, 200)
    assert ax.get_position().y0 >= 0.5               # the rect keeps the bottom half free


def test_save_figure_keeps_a_constrained_layout(tmp_path):
    fig, ax = new_figure(figsize=(4, 3), layout="constrained")
    ax.plot([0, 1], [0, 1], label="line")
    fig.legend(loc="outside right center")
    save_figure(fig, tmp_path / "c.png")
    assert type(fig.get_layout_engine()).__name__ == "ConstrainedLayoutEngine"
    assert ax.get_position().x1 < 0.9                # room left for the outside legend
