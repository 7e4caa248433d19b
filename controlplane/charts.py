"""Server-side SVG charts from real series: no JavaScript, no external library, no request off the page.

`time_chart` is the chart people read at 2 AM: a time axis with clock times, a y-axis with its unit
and a few round ticks, objectives as horizontal lines, a shaded band (a forecast range), events
marked on the time axis, missing data drawn as gaps (never as zero), a title, and a legend that
names every mark with its latest value. `line_chart` draws series over steps that are not clock
times (a proposal's evidence: observed minutes, then forecast points).

Colours are CSS classes (`tone-*`, see static/headroom.css): the page's Content-Security-Policy
allows no inline style.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from statistics import median

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

TONES = ("blue", "orange", "green", "purple", "red", "gray", "teal")
NO_DATA = '<p class="muted">No data to chart yet.</p>'
# Time-axis steps a person reads easily; the first that gives at most MAX_TIME_TICKS ticks is used.
TIME_STEPS_S = (15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
MAX_TIME_TICKS = 7


@dataclass(frozen=True)
class Line:
    """One measured series over time. A None value is a gap (unknown), never zero."""

    label: str
    points: Sequence[tuple[datetime, float | None]]
    tone: str = "blue"
    dashed: bool = False


@dataclass(frozen=True)
class Band:
    """A shaded range over time, e.g. a forecast from its expected value to its upper quantile."""

    label: str
    points: Sequence[tuple[datetime, float, float]]  # (at, low, high)
    tone: str = "orange"


@dataclass(frozen=True)
class Threshold:
    """A horizontal line: an objective (SLO) or a limit (max replicas)."""

    label: str
    value: float
    tone: str = "red"


@dataclass(frozen=True)
class Marker:
    """An event on the time axis (a scale-up applied, an approval, an alert firing)."""

    at: datetime
    label: str
    tone: str = "gray"


def nice_step(span: float, max_ticks: int = 5) -> float:
    """A round tick step (1, 2, 2.5 or 5 × 10^n) giving at most `max_ticks` intervals over `span`."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / max_ticks
    power = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 2.5, 5, 10):
        if factor * power >= raw:
            return factor * power
    return 10 * power


def y_ticks(low: float, high: float, max_ticks: int = 5) -> list[float]:
    """Round ticks from at or below `low` to at or above `high`."""
    step = nice_step(high - low, max_ticks)
    first, last = math.floor(low / step + 1e-9), math.ceil(high / step - 1e-9)
    return [round(index * step, 10) for index in range(first, max(last, first + 1) + 1)]


def time_ticks(start: datetime, end: datetime, tz: tzinfo) -> tuple[list[datetime], int]:
    """Tick times aligned to round clock times in `tz`, and the step in seconds."""
    span_s = (end - start).total_seconds()
    step_s = next((s for s in TIME_STEPS_S if span_s / s <= MAX_TIME_TICKS), TIME_STEPS_S[-1])
    # Stepped on the naive wall clock, from a little before the start: after the clocks go back, the
    # repeated hour's second pass shows wall times earlier than the start's.
    local = start.astimezone(tz).replace(tzinfo=None) - timedelta(hours=3)
    midnight = local.replace(hour=0, minute=0, second=0, microsecond=0)
    offset = (local - midnight).total_seconds()
    wall = midnight + timedelta(seconds=math.ceil(offset / step_s) * step_s)
    ticks: dict[float, datetime] = {}
    while min(wall.replace(tzinfo=tz, fold=fold).timestamp() for fold in (0, 1)) <= end.timestamp():
        # On a DST change a wall time the clock skips is no tick, and one it shows twice is a tick on each pass.
        for fold in (0, 1):
            shown = wall.replace(tzinfo=tz, fold=fold).astimezone(timezone.utc).astimezone(tz)
            if shown.replace(tzinfo=None) == wall and start <= shown <= end:
                ticks.setdefault(shown.timestamp(), shown)
        wall += timedelta(seconds=step_s)
    return [ticks[at] for at in sorted(ticks)], step_s


def format_value(value: float, unit: str, step: float | None = None) -> str:
    """A number with its unit, with as many decimals as the tick step needs."""
    reading = step is None
    step = _reading_step(value) if step is None else step
    decimals = 0
    while decimals < 4 and round(step * 10 ** decimals, 9) % 1:
        decimals += 1
    text = f"{value:,.{decimals}f}"
    if reading and "." in text:  # a single reading: 1.2 s, not 1.20 s
        text = text.rstrip("0").rstrip(".")
    if unit == "%":
        return text + " %"
    return f"{text} {unit}".strip()


def _n(coordinate: float) -> str:
    return f"{coordinate:.1f}"


def _reading_step(value: float) -> float:
    """The resolution a single reading is shown with: three significant digits, at most 3 decimals."""
    if value == 0 or not math.isfinite(value):
        return 1.0
    return max(10.0 ** (math.floor(math.log10(abs(value))) - 2), 0.001)


def _segments(points: Sequence[tuple[float, float | None]], max_gap_s: float) -> list[list[tuple[float, float]]]:
    """Split a series where a value is unknown or samples are further apart than `max_gap_s`."""
    segments: list[list[tuple[float, float]]] = []
    current: list[tuple[float, float]] = []
    last_t: float | None = None
    for t, value in points:
        if value is None or not math.isfinite(value) or (last_t is not None and t - last_t > max_gap_s):
            if current:
                segments.append(current)
            current = []
        if value is not None and math.isfinite(value):
            current.append((t, value))
        last_t = t
    if current:
        segments.append(current)
    return segments


def default_max_gap_s(lines: Sequence[Line]) -> float:
    """Three typical sample intervals (45 s at least): a missed tick or two is drawn through, an outage is a gap."""
    intervals = [(b[0] - a[0]).total_seconds() for line in lines for a, b in zip(line.points, line.points[1:])]
    intervals = [i for i in intervals if i > 0]
    return max(45.0, 3 * median(intervals)) if intervals else 45.0


def _latest(line: Line) -> float | None:
    return next((value for _, value in reversed(line.points) if value is not None and math.isfinite(value)), None)


def time_chart(
    title: str,
    unit: str,
    lines: Sequence[Line],
    *,
    bands: Sequence[Band] = (),
    thresholds: Sequence[Threshold] = (),
    markers: Sequence[Marker] = (),
    start: datetime | None = None,
    end: datetime | None = None,
    tz: tzinfo = timezone.utc,
    y_min: float | None = 0.0,
    max_gap_s: float | None = None,
    note: str = "",
    width: int = 560,
    height: int = 190,
) -> SafeString:
    """A chart of `lines` (and bands, thresholds, markers) over clock time; see the module docstring."""
    times = [at for line in lines for at, value in line.points if value is not None] + \
            [at for band in bands for at, _, _ in band.points]
    if not times:
        return format_html('<figure class="chart"><figcaption class="chart-title">{}</figcaption>{}</figure>',
                           title, mark_safe(NO_DATA))
    start = start or min(times)
    end = end or max(times)
    if end <= start:
        end = start + timedelta(minutes=1)
    values = [v for line in lines for _, v in line.points if v is not None and math.isfinite(v)]
    values += [x for band in bands for _, low, high in band.points for x in (low, high)]
    values += [t.value for t in thresholds]
    low = min(values + ([y_min] if y_min is not None else []))
    high = max(values)
    if high <= low:
        high = low + 1.0
    ticks = y_ticks(low, high * 1.05 if high > 0 else high)
    low, high = ticks[0], ticks[-1]
    step = ticks[1] - ticks[0]

    left, right, top, bottom = 58, 10, 8, 22
    plot_w, plot_h = width - left - right, height - top - bottom
    t0, span_s = start.timestamp(), (end - start).total_seconds()

    def x_of(at: datetime | float) -> float:
        t = at.timestamp() if isinstance(at, datetime) else at
        return left + (t - t0) / span_s * plot_w

    def y_of(value: float) -> float:
        return top + plot_h - (value - low) / (high - low) * plot_h

    def inside(at: datetime) -> bool:
        return start <= at <= end

    parts: list[str] = []
    grid = []
    for tick in ticks:
        grid.append(format_html('<line class="grid" x1="{}" y1="{}" x2="{}" y2="{}"/>'
                                '<text class="tick" x="{}" y="{}" text-anchor="end">{}</text>',
                                left, _n(y_of(tick)), width - right, _n(y_of(tick)), left - 4, _n(y_of(tick) + 3),
                                format_value(tick, unit, step)))
    clock, clock_step = time_ticks(start, end, tz)
    clock_format = "%H:%M:%S" if clock_step < 60 else "%H:%M"
    for at in clock:
        grid.append(format_html('<line class="axis" x1="{x}" y1="{b}" x2="{x}" y2="{b4}"/>'
                                '<text class="tick" x="{x}" y="{ty}" text-anchor="middle">{label}</text>',
                                x=_n(x_of(at)), b=top + plot_h, b4=top + plot_h + 4, ty=height - 6,
                                label=at.strftime(clock_format)))
    parts += grid
    parts.append(format_html('<line class="axis" x1="{l}" y1="{b}" x2="{r}" y2="{b}"/>'
                             '<line class="axis" x1="{l}" y1="{t}" x2="{l}" y2="{b}"/>',
                             l=left, r=width - right, t=top, b=top + plot_h))
    for band in bands:
        inside_points = sorted((p for p in band.points if inside(p[0])), key=lambda p: p[0])
        if len(inside_points) >= 2:
            upper = [f"{x_of(at):.1f},{y_of(min(hi, high)):.1f}" for at, _, hi in inside_points]
            lower = [f"{x_of(at):.1f},{y_of(max(lo, low)):.1f}" for at, lo, _ in reversed(inside_points)]
            parts.append(format_html('<polygon class="band tone-{}" points="{}"/>', band.tone, " ".join(upper + lower)))
    for threshold in thresholds:
        if low <= threshold.value <= high:
            y = _n(y_of(threshold.value))
            parts.append(format_html('<line class="threshold tone-{}" x1="{}" y1="{}" x2="{}" y2="{}"/>',
                                     threshold.tone, left, y, width - right, y))
    gap_s = max_gap_s if max_gap_s is not None else default_max_gap_s(lines)
    for line in lines:
        timed = [(at.timestamp(), value) for at, value in line.points if inside(at)]
        for segment in _segments(timed, gap_s):
            coordinates = " ".join(f"{x_of(t):.1f},{y_of(v):.1f}" for t, v in segment)
            if len(segment) == 1:  # a lone reading between gaps still shows
                parts.append(format_html('<circle class="dot tone-{}" cx="{}" cy="{}" r="2"/>',
                                         line.tone, _n(x_of(segment[0][0])), _n(y_of(segment[0][1]))))
            else:
                parts.append(format_html('<polyline class="line tone-{}{}" points="{}"/>', line.tone,
                                         " dashed" if line.dashed else "", coordinates))
    shown_markers = [m for m in sorted(markers, key=lambda m: m.at) if inside(m.at)]
    label_ys: list[tuple[float, int]] = []  # (x, row) of labels drawn: close markers stack their numbers
    for number, marker in enumerate(shown_markers, start=1):
        x = x_of(marker.at)
        row = sum(1 for drawn_x, _ in label_ys if abs(drawn_x - x) < 9)
        label_ys.append((x, row))
        parts.append(format_html('<line class="marker tone-{tone}" x1="{x}" y1="{t}" x2="{x}" y2="{b}"/>'
                                 '<text class="marker-label tone-{tone}" x="{x}" y="{ty}" text-anchor="middle">{n}'
                                 '<title>{label}</title></text>',
                                 tone=marker.tone, x=_n(x), t=top + 8, b=top + plot_h, ty=top + 7 + 10 * min(row, 8),
                                 n=number,
                                 label=f"{marker.at.astimezone(tz):%H:%M:%S} {marker.label}"))

    legend = _legend(lines, bands, thresholds, unit)
    marker_list = format_html_join(
        "", '<li><span class="marker-key tone-{}">{}</span> {} {}</li>',
        ((m.tone, n, m.at.astimezone(tz).strftime("%H:%M:%S"), m.label) for n, m in enumerate(shown_markers, start=1)))
    tz_name = start.astimezone(tz).tzname() or str(tz)
    return format_html(
        '<figure class="chart"><figcaption class="chart-title">{title}</figcaption>'
        '<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{title}">'
        '<title>{title}</title>{body}</svg>'
        '<div class="chart-legend">{legend}<span class="muted">time in {tz}{note}</span></div>'
        '{markers}</figure>',
        title=title, w=width, h=height, body=mark_safe("".join(parts)), legend=legend, tz=tz_name,
        note=f" · {note}" if note else "",
        markers=format_html('<ol class="chart-events">{}</ol>', marker_list) if shown_markers else "",
    )


def _legend(lines: Sequence[Line], bands: Sequence[Band], thresholds: Sequence[Threshold], unit: str) -> SafeString:
    items = []
    for line in lines:
        latest = _latest(line)
        now = format_value(latest, unit) if latest is not None else "no data"
        items.append(format_html('<span class="key line tone-{}{}">{}</span> <b>{}</b>', line.tone,
                                 " dashed" if line.dashed else "", line.label, now))
    for band in bands:
        items.append(format_html('<span class="key band tone-{}">{}</span>', band.tone, band.label))
    for threshold in thresholds:
        items.append(format_html('<span class="key threshold tone-{}">{}</span> {}', threshold.tone, threshold.label,
                                 format_value(threshold.value, unit)))
    return format_html_join("", "<span class=\"legend-item\">{}</span>", ((item,) for item in items))


# --- step charts (not clock time) ---------------------------------------------------------------------


@dataclass(frozen=True)
class Series:
    """A series over steps (not clock times), e.g. a proposal's evidence. None is a gap."""

    label: str
    values: Sequence[float | None]
    css_class: str


def line_chart(series: Sequence[Series], width: int = 520, height: int = 140, y_label: str = "",
               title: str = "") -> SafeString:
    """Series over equal steps with a labelled y-axis; `y_label` says what the steps and values are."""
    points = [value for line in series for value in line.values if value is not None]
    if not points:
        return mark_safe(NO_DATA)  # a constant, nothing to escape
    ticks = y_ticks(min(0.0, min(points)), max(points) * 1.08 or 1.0, max_ticks=3)
    low, high = ticks[0], ticks[-1]
    steps = max(len(line.values) for line in series)
    left, bottom = 40, 16
    plot_w, plot_h = width - left - 4, height - bottom - 4
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0

    def xy(index: int, value: float) -> tuple[float, float]:
        return left + (index / max(steps - 1, 1)) * plot_w, 4 + plot_h - (value - low) / (high - low) * plot_h

    paths = []
    for line in series:
        indexed: list[tuple[float, float | None]] = list(enumerate(line.values))  # type: ignore[arg-type]
        for segment in _segments(indexed, max_gap_s=1.0):
            paths.append((line.css_class, " ".join("{:.1f},{:.1f}".format(*xy(int(i), v)) for i, v in segment)))
    tick_marks = format_html_join("", '<text class="tick" x="{}" y="{}" text-anchor="end">{}</text>'
                                      '<line class="grid" x1="{}" y1="{}" x2="{}" y2="{}"/>',
                                  ((left - 3, _n(xy(0, t)[1] + 3), format_value(t, "", step), left, _n(xy(0, t)[1]),
                                    width - 4, _n(xy(0, t)[1])) for t in ticks))
    legend = format_html_join(" ", '<span class="legend {}">{}</span>', ((line.css_class, line.label) for line in series))
    polylines = format_html_join("", '<polyline class="{}" points="{}" />', paths)
    return format_html(
        '<figure class="chart">{title}<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{name}">'
        '<line class="axis" x1="{l}" y1="{b}" x2="{r}" y2="{b}" />{ticks}'
        '{polylines}</svg><figcaption>{legend} <span class="muted">{y_label}</span></figcaption></figure>',
        title=format_html('<div class="chart-title">{}</div>', title) if title else "",
        # An image needs a name a screen reader can say: the title, else what the lines are over which steps.
        name=title or " ".join([", ".join(line.label for line in series), y_label]).strip(),
        w=width, h=height, l=left, r=width - 4, b=height - bottom, ticks=tick_marks,
        polylines=polylines, legend=legend, y_label=y_label,
    )


__all__ = ["Band", "Line", "Marker", "Series", "Threshold", "format_value", "line_chart", "nice_step",
           "time_chart", "time_ticks", "y_ticks",
           "cost_latency_curve", "worst_day_chart"]


# ---------------------------------------------------------------------------- warm-pool report charts
# Whole SVG documents with inline styles: the same markup is shown in the page and downloaded as a file.

_REPORT_COLOURS = {"demand": "#6b7280", "current": "#2563eb", "recommended": "#16a34a", "slo": "#dc2626"}


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
