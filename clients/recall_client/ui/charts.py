"""Small SVG line charts, drawn on the server: no chart library, no build step, no script.

Only numbers and the caller's fixed label reach the markup, and the label is escaped.
"""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

__all__ = ["sparkline"]


def sparkline(values: Sequence[float], label: str, *, width: int = 240, height: int = 48) -> Markup:
    """A line of ``values`` (oldest first) scaled to the box; its title says latest and peak."""
    pad = 2
    if not values:
        return Markup(
            '<svg class="spark" role="img" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
            'aria-label="{label}: no samples yet"><title>{label}: no samples yet</title></svg>'
        ).format(w=width, h=height, label=label)
    peak = max(values)
    top = peak if peak > 0 else 1.0
    step = (width - 2 * pad) / max(len(values) - 1, 1)
    points = " ".join(
        f"{pad + i * step:.1f},{height - pad - (v / top) * (height - 2 * pad):.1f}"
        for i, v in enumerate(values)
    )
    summary = f"{escape(label)}: now {values[-1]:.4g}, peak {peak:.4g} over {len(values)} samples"
    return Markup(
        '<svg class="spark" role="img" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
        'aria-label="{summary}"><title>{summary}</title>'
        '<polyline fill="none" stroke="currentColor" stroke-width="1.5" points="{points}"/></svg>'
    ).format(w=width, h=height, summary=Markup(summary), points=points)
