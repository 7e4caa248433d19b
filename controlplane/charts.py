"""Small server-side SVG line charts from real series (no JavaScript, no external library)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe


@dataclass(frozen=True)
class Series:
    label: str
    values: Sequence[float | None]  # None: no data at that step (a gap, never drawn as zero)
    css_class: str


def line_chart(series: Sequence[Series], width: int = 520, height: int = 140, y_label: str = "") -> SafeString:
    points = [value for line in series for value in line.values if value is not None]
    if not points:
        return mark_safe('<p class="muted">No data to chart yet.</p>')  # a constant, nothing to escape
    top = max(points) * 1.1 or 1.0
    steps = max(len(line.values) for line in series)
    pad_left, pad_bottom = 34, 16
    plot_w, plot_h = width - pad_left - 4, height - pad_bottom - 4

    def xy(index: int, value: float) -> str:
        x = pad_left + (index / max(steps - 1, 1)) * plot_w
        y = 4 + plot_h - (value / top) * plot_h
        return f"{x:.1f},{y:.1f}"

    paths = []
    for line in series:
        segments, current = [], []
        for index, value in enumerate(line.values):
            if value is None:
                if current:
                    segments.append(current)
                current = []
            else:
                current.append(xy(index, value))
        if current:
            segments.append(current)
        for segment in segments:
            paths.append((line.css_class, " ".join(segment)))
    legend = format_html_join(" ", '<span class="legend {}">{}</span>', ((line.css_class, line.label) for line in series))
    polylines = format_html_join("", '<polyline class="{}" points="{}" />', paths)
    return format_html(
        '<figure class="chart"><svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img">'
        '<line class="axis" x1="{l}" y1="{b}" x2="{r}" y2="{b}" />'
        '<text class="tick" x="2" y="12">{top}</text><text class="tick" x="2" y="{b}">0</text>'
        '{polylines}</svg><figcaption>{legend} <span class="muted">{y_label}</span></figcaption></figure>',
        w=width, h=height, l=pad_left, r=width - 4, b=height - pad_bottom, top=f"{top:.0f}",
        polylines=polylines, legend=legend, y_label=y_label,
    )
