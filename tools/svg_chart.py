"""Line charts as SVG elements, for the README's and docs' pictures (tools/loss_curve.py, tools/gpu_panel.py): axes with
round ticks, a polyline per series with its name as the line's <title>, and a legend. No plotting library: the pictures
diff as text, and the tests read their lines back."""
from __future__ import annotations

import math
import os
import re
import stat
from dataclasses import dataclass
from html import escape

from workload import cli

Points = list[tuple[float, float]]

# XML 1.0's Char production (https://www.w3.org/TR/xml/#charsets, section 2.2): #x9 | #xA | #xD | [#x20-#xD7FF] |
# [#xE000-#xFFFD] | [#x10000-#x10FFFF]. Every other code point (C0 controls but tab/LF/CR, lone surrogates, U+FFFE,
# U+FFFF) makes the document not well-formed, even written as a character reference (section 4.1, "Well-formedness
# constraint: Legal Character"), so no escape can carry it: it is replaced by U+FFFD.
_NOT_XML_CHAR = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def text(value: object) -> str:
    """Any text a picture writes (a title, a series' name, a header from a recording), as XML character data or an
    attribute value: the characters XML 1.0 forbids replaced by U+FFFD, then &, <, > and quotes escaped."""
    return escape(_NOT_XML_CHAR.sub("\ufffd", str(value)))


@dataclass(frozen=True)
class Box:
    """Where a chart's plot area sits in the picture, in pixels."""
    left: float
    top: float
    width: float
    height: float


# The largest magnitude a chart draws. The numbers come from files (event records, recordings) anyone may have
# written: NaN and +-inf, which float() and struct.unpack("<f") both give (Python's float: IEEE 754 binary64), and
# finite values near sys.float_info.max (1.8e308) whose differences overflow to inf (1e308 - -1e308), so that
# log10(inf) and 10 ** 309 raise OverflowError. At 1e150 every span, product and tick a chart computes stays finite
# (1e150 * 1e150 < 1.8e308), and no loss, learning rate, step, second or GPU metric comes near it.
LARGEST = 1e150
# A span below this is drawn as a flat line: (high - low) / count would underflow to 0, and log10(0) is a ValueError.
SMALLEST_SPAN = 1e-150


def drawable(step: float, value: float) -> bool:
    """Whether a point is drawn: both numbers finite and within +-LARGEST (the one rule for untrusted numbers)."""
    return all(math.isfinite(number) and abs(number) <= LARGEST for number in (step, value))


def undrawn(series: list[tuple[str, str, Points]]) -> int:
    """How many points of `series` `chart` leaves out (its note in the picture; the tools print it too)."""
    return sum(not drawable(step, value) for _, _, points in series for step, value in points)


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About `count` round values (1, 2 or 5 times a power of ten apart) covering [low, high]; finite for any finite
    bounds within +-LARGEST (chart keeps to them), at most a few dozen values."""
    low, high = (min(max(bound, -LARGEST), LARGEST) if not math.isnan(bound) else 0.0 for bound in (low, high))
    if not high - low >= SMALLEST_SPAN:  # also NaN, which compares false
        high = low + max(1.0, abs(low) * 1e-6)
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(factor * magnitude for factor in (1, 2, 5, 10) if factor * magnitude >= raw)
    first = math.floor(low / step) * step
    return [first + index * step for index in range(min(int(math.ceil((high - first) / step - 1e-9)), 4 * count) + 1)]


def chart(series: list[tuple[str, str, Points]], x_high: float, box: Box, title: str, legend_width: int = 190,
          dots_up_to: int = 12, legend: bool = True) -> list[str]:
    """One chart: axes from 0 with ticks, and each (name, color, points) as a line, with dots where it has few, and
    a legend in its top right corner unless `legend` is off. Points that are not `drawable` are left out, said in a
    note line under the title; the axes span the points drawn."""
    dropped = undrawn(series)
    series = [(name, color, [(step, value) for step, value in points if drawable(step, value)])
              for name, color, points in series]
    values = [value for _, _, points in series for _, value in points] or [0.0]
    y_ticks = nice_ticks(min(0.0, min(values)), max(values))
    steps = [step for _, _, points in series for step, _ in points]
    if not drawable(x_high, 0.0):  # a last step or time that is itself not drawable: the axis ends at the last drawn
        x_high = max(steps, default=1.0)
    x_ticks = nice_ticks(0, x_high)
    x_span, y_span = x_ticks[-1] - x_ticks[0], y_ticks[-1] - y_ticks[0]
    right = box.left + box.width

    def x(step: float) -> float:
        return box.left + (step - x_ticks[0]) / x_span * box.width

    def y(value: float) -> float:
        return box.top + box.height - (value - y_ticks[0]) / y_span * box.height

    out = [f'<text x="{box.left}" y="{box.top - 12}" font-weight="bold">{text(title)}</text>',
           f'<rect x="{box.left}" y="{box.top}" width="{box.width}" height="{box.height}" fill="none" stroke="#999"/>']
    if dropped:
        out.append(f'<text x="{box.left + box.width}" y="{box.top - 12}" text-anchor="end" fill="#a00">'
                   f'{undrawn_note(dropped)}</text>')
    for tick in y_ticks:
        out.append(f'<line x1="{box.left}" x2="{right}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{box.left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:g}</text>')
    for tick in x_ticks:
        out.append(f'<text x="{x(tick):.1f}" y="{box.top + box.height + 16}" text-anchor="middle">{tick:g}</text>')
    for index, (name, color, points) in enumerate(series):
        path = " ".join(f"{x(step):.1f},{y(value):.1f}" for step, value in points)
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{path}"><title>{text(name)}'
                   f'</title></polyline>')
        if len(points) <= dots_up_to:
            out += [f'<circle cx="{x(step):.1f}" cy="{y(value):.1f}" r="3.5" fill="{color}"/>'
                    for step, value in points]
        if not legend:
            continue
        legend_y = box.top + 18 + 18 * index
        out.append(f'<line x1="{right - legend_width}" x2="{right - legend_width + 24}" y1="{legend_y - 4}" '
                   f'y2="{legend_y - 4}" stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{right - legend_width + 30}" y="{legend_y}">{text(name)}</text>')
    return out


def undrawn_note(count: int) -> str:
    """The note for `count` points left out, in the picture and on stderr."""
    return f"{count:,} point{'s' if count != 1 else ''} not drawn: NaN, infinite or beyond \u00b1{LARGEST:g}"


def document(width: int, height: int, body: list[str]) -> str:
    """The SVG file: a white page of `width` x `height` holding the elements."""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">\n'
            f'<rect width="{width}" height="{height}" fill="white"/>\n' + "\n".join(body) + "\n</svg>\n")


def check_out(out: str) -> None:
    """--out must name an SVG file in a directory that is there and takes a file: refused before any work (the event
    files read, an s3:// run copied), not when the picture is written."""
    if not out.lower().endswith(".svg"):
        raise cli.UsageError(f"--out {out}: the picture is SVG; give a file name ending in .svg",
                             hint="a browser or any SVG viewer shows it; `rsvg-convert` or Inkscape makes a PNG of it")
    from workload.output_paths import check_output, length_problem
    from workload.storage import unwritable_directory

    if (why := length_problem(out)) is not None:  # before the checks below repeat a path of 4 KiB
        raise cli.UsageError(f"--out: the path {why}; give a shorter file name")
    parent = os.path.dirname(os.path.abspath(out))
    if os.path.islink(out):  # before isdir/exists below follow it: a link is refused whatever it points to
        check_output("--out", out)
    if os.path.isdir(out):
        raise cli.UsageError(f"--out {out} is a directory; give a file name ending in .svg")
    if os.path.exists(parent) and not os.path.isdir(parent):
        raise cli.UsageError(f"--out {out}: {os.path.dirname(out)} is a file, not a directory")
    if not os.path.isdir(parent):
        raise cli.UsageError(f"--out {out}: no directory {os.path.dirname(out) or parent} to write it in; create it "
                             "first (mkdir -p), or name a file in one that is there")
    if (why := unwritable_directory(parent)) is not None:
        raise cli.UsageError(f"--out {out}: {why}")
    check_output("--out", out)  # a FIFO, a socket, a device refused unopened (open() of a FIFO waits for a reader)


def write(out: str, picture: str) -> None:
    """The picture into --out, or a usage error naming it."""
    try:
        # O_NONBLOCK: a FIFO put there since check_out fails at once (ENXIO), not waits for a reader; O_NOFOLLOW: a
        # link put there since is not written through (ELOOP), by the rule of workload/output_paths.py.
        descriptor = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NONBLOCK", 0)
                             | getattr(os, "O_NOFOLLOW", 0), 0o666)
        with os.fdopen(descriptor, "w") as file:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                raise cli.UsageError(f"--out {out} is not a regular file (refused unwritten)")
            file.write(picture)
    except OSError as error:
        raise cli.UsageError(f"--out {out} cannot be written: {error.strerror}") from None
