"""Boxes and arrows that the diagrams of several lessons are drawn with."""

from __future__ import annotations

from matplotlib.patches import FancyBboxPatch


def box(ax, x: float, y: float, w: float, h: float, text: str, colour: str) -> None:
    """A rounded box labelled ``text`` in its middle, lower left corner at (x, y)."""
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02", facecolor=colour, edgecolor="black"))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=8)


def arrow(ax, start: tuple[float, float], end: tuple[float, float], colour: str, style: str = "-|>") -> None:
    """An arrow from ``start`` to ``end`` (``style``: a matplotlib arrowstyle)."""
    ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle=style, color=colour, lw=1.2))
