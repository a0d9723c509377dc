"""The SVG plot of ``controller_bench.py``, written by hand (no plotting library is installed).

Two panels: the CDF of single-domain create→Ready latency for both modes with the p50 target, and the
number of Ready domains over time during the burst with the burst target.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

TARGET_P50_MS = 100.0
TARGET_BURST_S = 10.0


_W, _H, _PAD = 460, 320, 55


def _text(x: float, y: float, text: str, *, size: int = 10, anchor: str = "middle") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}">{escape(text)}</text>'


def _axes(
    x0: float, title: str, x_label: str, y_label: str, x_max: float, y_max: float, ticks: int = 5
) -> list[str]:
    left, right, top, bottom = x0 + _PAD, x0 + _W - 15, 30, _H - 45
    parts = [
        f'<text x="{x0 + _W / 2}" y="18" text-anchor="middle" font-size="14">{escape(title)}</text>',
        f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="black"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="black"/>',
        _text((left + right) / 2, _H - 8, x_label, size=12),
        f'<text x="{x0 + 14}" y="{(top + bottom) / 2}" text-anchor="middle" font-size="12" '
        f'transform="rotate(-90 {x0 + 14} {(top + bottom) / 2})">{escape(y_label)}</text>',
    ]
    for i in range(ticks + 1):
        x = left + (right - left) * i / ticks
        y = bottom - (bottom - top) * i / ticks
        parts.append(_text(x, bottom + 15, f"{x_max * i / ticks:.3g}"))
        parts.append(_text(left - 5, y + 3, f"{y_max * i / ticks:.3g}", anchor="end"))
        parts.append(f'<line x1="{left}" y1="{y}" x2="{right}" y2="{y}" stroke="#ddd"/>')
    return parts


def _polyline(x0: float, points: list[tuple[float, float]], x_max: float, y_max: float, color: str) -> str:
    left, right, top, bottom = x0 + _PAD, x0 + _W - 15, 30, _H - 45
    coords = " ".join(
        f"{left + (right - left) * min(x / x_max, 1):.1f},{bottom - (bottom - top) * min(y / y_max, 1):.1f}"
        for x, y in points
    )
    return f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="2"/>'


def _cdf(samples: list[float]) -> list[tuple[float, float]]:
    ordered = sorted(samples)
    return [(value, (i + 1) / len(ordered)) for i, value in enumerate(ordered)]


def write_plot(results: dict[str, Any], path: Path) -> None:
    driver = results["single_driver_managed"]["samples_ms"]
    host = results["single_host_managed"]["samples_ms"]
    x_max = max(TARGET_P50_MS * 2, *driver, *host) * 1.05
    curve = results["burst_host_managed"]["ready_curve_s"]
    t_max = max(TARGET_BURST_S, curve[-1]) * 1.05
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * _W}" height="{_H}" font-family="sans-serif">'
    ]
    parts += _axes(
        0, "Single domain: create → Ready (CDF)", "milliseconds", "fraction of domains", x_max, 1.0
    )
    parts.append(_polyline(0, _cdf(driver), x_max, 1.0, "#1f77b4"))
    parts.append(_polyline(0, _cdf(host), x_max, 1.0, "#d62728"))
    target_x = _PAD + (_W - 15 - _PAD) * TARGET_P50_MS / x_max
    parts.append(
        f'<line x1="{target_x}" y1="30" x2="{target_x}" y2="{_H - 45}" stroke="gray" stroke-dasharray="4"/>'
    )
    parts.append(f'<text x="{_PAD + 10}" y="45" font-size="11" fill="#1f77b4">driver-managed</text>')
    parts.append(f'<text x="{_PAD + 10}" y="60" font-size="11" fill="#d62728">host-managed</text>')
    parts.append(f'<text x="{target_x + 3}" y="75" font-size="10" fill="gray">p50 target</text>')
    count = len(curve)
    parts += _axes(
        _W,
        f"Burst of {count} host-managed domains",
        "seconds since first create",
        "domains Ready",
        t_max,
        count,
    )
    parts.append(_polyline(_W, [(t, i + 1) for i, t in enumerate(curve)], t_max, count, "#2ca02c"))
    burst_x = _W + _PAD + (_W - 15 - _PAD) * TARGET_BURST_S / t_max
    parts.append(
        f'<line x1="{burst_x}" y1="30" x2="{burst_x}" y2="{_H - 45}" stroke="gray" stroke-dasharray="4"/>'
    )
    parts.append("</svg>")
    path.write_text("\n".join(parts))
