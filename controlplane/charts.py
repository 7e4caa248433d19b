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


# ---------------------------------------------------------------------------- warm-pool report charts
# Whole SVG documents with inline styles: the same markup is shown in the page and downloaded as a file.

_REPORT_COLOURS = {"demand": "#6b7280", "current": "#2563eb", "recommended": "#16a34a", "slo": "#dc2626"}


def _n(value: float) -> str:
    return f"{value:.1f}"


def _svg_document(width: int, height: int, title: str, body: SafeString) -> SafeString:
    return format_html(
        '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
        'font-family="sans-serif" font-size="11"><title>{title}</title>'
        '<rect width="{w}" height="{h}" fill="#ffffff" />{body}</svg>',
        w=width, h=height, title=title, body=body,
    )


def _axis_range(values: Sequence[float], pad: float = 0.08) -> tuple[float, float]:
    low, high = min(values), max(values)
    span = (high - low) or abs(high) or 1.0
    return low - span * pad, high + span * pad


def cost_latency_curve(rows: Sequence[dict], objective: float, width: int = 560, height: int = 320) -> SafeString:
    """Cost (on-demand $ over the period) against SLO attainment, one point per warm-pool size;
    the current setting ringed, the recommended one filled green, the objective dashed."""
    if not rows:
        return _svg_document(width, height, "No sizes", mark_safe(""))
    left, right, top, bottom = 64, 16, 20, 44
    plot_w, plot_h = width - left - right, height - top - bottom
    x_low, x_high = _axis_range([row["cost_on_demand_usd"] for row in rows])
    y_low, y_high = _axis_range([row["slo_attainment"] * 100 for row in rows] + [objective * 100])

    def x(value: float) -> float:
        return left + (value - x_low) / (x_high - x_low) * plot_w

    def y(value: float) -> float:
        return top + plot_h - (value - y_low) / (y_high - y_low) * plot_h

    ordered = sorted(rows, key=lambda row: row["warm_pool_pct"])
    line = " ".join(f"{x(row['cost_on_demand_usd']):.1f},{y(row['slo_attainment'] * 100):.1f}" for row in ordered)
    points = format_html_join("", (
        '<circle cx="{}" cy="{}" r="{}" fill="{}" stroke="{}" stroke-width="{}" />'
        '<text x="{}" y="{}" fill="#111827">{} %</text>'), (
        (_n(x(row["cost_on_demand_usd"])), _n(y(row["slo_attainment"] * 100)), 7 if row.get("current") else 4,
         _REPORT_COLOURS["recommended"] if row.get("recommended") else "#ffffff",
         _REPORT_COLOURS["current"] if row.get("current") else "#374151", 2.5 if row.get("current") else 1.2,
         _n(x(row["cost_on_demand_usd"]) + 8), _n(y(row["slo_attainment"] * 100) - 6), f"{row['warm_pool_pct']:g}")
        for row in ordered))
    body = format_html(
        '<line x1="{l}" y1="{b}" x2="{r}" y2="{b}" stroke="#9ca3af" /><line x1="{l}" y1="{t}" x2="{l}" y2="{b}" stroke="#9ca3af" />'
        '<line x1="{l}" y1="{obj_y}" x2="{r}" y2="{obj_y}" stroke="{slo}" stroke-dasharray="5 4" />'
        '<text x="{r}" y="{obj_label_y}" text-anchor="end" fill="{slo}">objective {obj} %</text>'
        '<polyline points="{line}" fill="none" stroke="#9ca3af" />{points}'
        '<text x="{l}" y="{x_label_y}" fill="#374151">${x_low}</text>'
        '<text x="{r}" y="{x_label_y}" text-anchor="end" fill="#374151">${x_high}</text>'
        '<text x="{mid}" y="{x_title_y}" text-anchor="middle" fill="#111827">cost over the period, on demand (USD)</text>'
        '<text x="4" y="{t_text}" fill="#374151">{y_high} %</text><text x="4" y="{b}" fill="#374151">{y_low} %</text>'
        '<text x="4" y="12" fill="#111827">SLO attainment</text>'
        '<text x="{r}" y="12" text-anchor="end" fill="#374151">ringed: current · green: recommended</text>',
        l=left, r=width - right, t=top, b=top + plot_h, obj_y=_n(y(objective * 100)), obj_label_y=_n(y(objective * 100) - 4),
        slo=_REPORT_COLOURS["slo"], obj=f"{objective * 100:.2f}", line=line, points=points, x_low=f"{x_low:,.0f}",
        x_high=f"{x_high:,.0f}", x_label_y=top + plot_h + 14, x_title_y=top + plot_h + 32, mid=_n(left + plot_w / 2),
        t_text=top + 8, y_high=f"{y_high:.2f}", y_low=f"{y_low:.2f}",
    )
    return _svg_document(width, height, "Cost against SLO attainment by warm-pool size", body)


def _panel(lines: Sequence[tuple[str, Sequence[float | None], str]], left: int, top: int, plot_w: int, plot_h: int,
           title: str, reference: tuple[str, float] | None = None) -> SafeString:
    """One panel of a time chart: polylines (gaps where None), a zero-based y axis, an optional line."""
    values = [value for _, series, _ in lines for value in series if value is not None]
    if reference is not None:
        values.append(reference[1])
    highest = (max(values) if values else 1.0) * 1.1 or 1.0
    steps = max((len(series) for _, series, _ in lines), default=1)

    def xy(index: int, value: float) -> str:
        return f"{left + index / max(steps - 1, 1) * plot_w:.1f},{top + plot_h - value / highest * plot_h:.1f}"

    paths = []
    for _, series, colour in lines:
        segment: list[str] = []
        for index, value in enumerate(list(series) + [None]):
            if value is None:
                if len(segment) > 1:
                    paths.append((colour, " ".join(segment)))
                segment = []
            else:
                segment.append(xy(index, value))
    polylines = format_html_join("", '<polyline points="{1}" fill="none" stroke="{0}" stroke-width="1.2" />', paths)
    legend = format_html_join("", '<tspan fill="{}"> ■ {}</tspan>', ((colour, label) for label, _, colour in lines))
    guide = mark_safe("")
    if reference is not None:
        level = top + plot_h - reference[1] / highest * plot_h
        guide = format_html('<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" stroke-dasharray="5 4" />'
                            '<text x="{}" y="{}" text-anchor="end" fill="{}">{}</text>',
                            left, _n(level), left + plot_w, _n(level), _REPORT_COLOURS["slo"], left + plot_w, _n(level - 3),
                            _REPORT_COLOURS["slo"], reference[0])
    return format_html(
        '<text x="{l}" y="{title_y}" fill="#111827">{title}{legend}</text>'
        '<line x1="{l}" y1="{b}" x2="{r}" y2="{b}" stroke="#9ca3af" />'
        '<text x="{tick_x}" y="{tick_top}" text-anchor="end" fill="#374151">{high}</text>'
        '<text x="{tick_x}" y="{b}" text-anchor="end" fill="#374151">0</text>{guide}{polylines}',
        l=left, r=left + plot_w, b=top + plot_h, title_y=top - 6, title=title, legend=legend, tick_x=left - 4,
        tick_top=top + 8, high=f"{highest:,.0f}", guide=guide, polylines=polylines,
    )


def worst_day_chart(worst_day: dict | None, slo_ttft_ms: float, width: int = 760, height: int = 360) -> SafeString:
    """The worst day per minute: demand against ready capacity, then TTFT p99, for the current and
    the recommended warm-pool setting."""
    if not worst_day:
        return _svg_document(width, height, "No worst day", mark_safe(""))
    left, plot_w = 56, width - 56 - 16
    settings = [("current", worst_day["current_pct"])]
    if worst_day.get("recommended") and worst_day.get("recommended_pct") != worst_day["current_pct"]:
        settings.append(("recommended", worst_day["recommended_pct"]))
    capacity = [("demand req/s", worst_day["demand_rps"], _REPORT_COLOURS["demand"])] + [
        (f"ready capacity at {pct:g} %", worst_day[name]["ready_capacity_rps"], _REPORT_COLOURS[name])
        for name, pct in settings]
    latency = [(f"TTFT p99 at {pct:g} % (ms)", worst_day[name]["ttft_p99_ms"], _REPORT_COLOURS[name])
               for name, pct in settings]
    minutes = max(2, len(worst_day["demand_rps"]))
    every = max(1, round(minutes / 60 / 8))  # about eight hour labels, whatever the day's length
    hours = format_html_join("", '<text x="{}" y="{}" text-anchor="middle" fill="#374151">{}h</text>', (
        (_n(left + min(1.0, hour * 60 / (minutes - 1)) * plot_w), height - 6, hour)
        for hour in range(0, minutes // 60 + 1, every)))
    body = format_html(
        "{}{}{}",
        _panel(capacity, left, 24, plot_w, 130, f"day {worst_day['day'] + 1} of the period:"),
        _panel(latency, left, 200, plot_w, 130, "latency:", (f"SLO {slo_ttft_ms:g} ms", slo_ttft_ms)),
        hours,
    )
    return _svg_document(width, height, "The worst day: demand, ready capacity and latency", body)
