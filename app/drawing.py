"""A canvas of plain shapes (rectangles, lines, markers, text) written out two ways from the same list:
SVG text and a PNG image (Pillow). The figure pack draws the lab's figures on it (`figure_files.py`), so a
slide's SVG and PNG of a figure show the same thing. Pure: no browser, no network, no global state.

Coordinates are pixels, origin top left. Colours are anything Pillow's ImageColor reads ('#1f77b4',
'rgb(8,48,107)', 'rgba(0,0,0,0)', 'white'); SVG gets them as #rrggbb plus an opacity.
"""

from __future__ import annotations

import io
import math
import os
from dataclasses import dataclass, field
from functools import lru_cache
from xml.sax.saxutils import escape, quoteattr

from PIL import Image, ImageColor, ImageDraw, ImageFont

FONT_FILES = ("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
              "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf")
BOLD_FILES = ("/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf",)
SVG_FONT = "DejaVu Sans, Inter, system-ui, sans-serif"
DASHES = {"dash": (6, 4), "dot": (2, 3), "dashdot": (6, 3, 2, 3)}


@lru_cache(maxsize=64)
def font(size: float, bold: bool = False) -> ImageFont.ImageFont:
    """A TrueType font at `size` px (DejaVu where installed: it has τ, ◆, ␣ and ↵), else Pillow's own."""
    for path in (BOLD_FILES if bold else ()) + FONT_FILES:
        if os.path.isfile(path):
            return ImageFont.truetype(path, max(1, round(size)))
    return ImageFont.load_default(size=max(1, round(size)))


def text_width(text: str, size: float, bold: bool = False) -> float:
    return font(size, bold).getlength(text)


def rgba(colour) -> tuple[int, int, int, int]:
    """(r, g, b, a) of a colour; anything unreadable is dark grey (a trace never names a colour)."""
    try:
        c = ImageColor.getrgb(str(colour))
    except ValueError:
        return (68, 68, 68, 255)
    return c if len(c) == 4 else (*c, 255)


def _svg_paint(attr: str, colour) -> str:
    r, g, b, a = rgba(colour)
    if a == 0:
        return f' {attr}="none"'
    out = f' {attr}="#{r:02x}{g:02x}{b:02x}"'
    return out + (f' {attr}-opacity="{a / 255:.3g}"' if a < 255 else "")


def _n(v: float) -> str:
    return f"{v:.2f}".rstrip("0").rstrip(".")


@dataclass
class Canvas:
    width: int
    height: int
    background: str = "white"
    items: list[tuple] = field(default_factory=list)

    # ---- drawing ------------------------------------------------------------------------------
    def rect(self, x, y, w, h, fill, stroke=None, stroke_width=0.0):
        self.items.append(("rect", x, y, w, h, fill, stroke, stroke_width))

    def line(self, points, colour, width=1.0, dash=None):
        """A polyline through `points` [(x, y), ...]; dash: None/'solid', 'dash', 'dot' or 'dashdot'."""
        if len(points) >= 2:
            self.items.append(("line", tuple(points), colour, width, dash if dash in DASHES else None))

    def marker(self, x, y, symbol, size, fill, stroke="#333", stroke_width=1.0):
        self.items.append(("marker", x, y, symbol, size, fill, stroke, stroke_width))

    def text(self, x, y, text, size=13.0, colour="#2a3f5f", anchor="start", bold=False, angle=0.0):
        """Text whose baseline middle is at y; anchor: 'start', 'middle' or 'end' at x; angle in degrees
        (counter-clockwise, as a y-axis title reads)."""
        if text:
            self.items.append(("text", x, y, str(text), size, colour, anchor, bold, angle))

    # ---- SVG ----------------------------------------------------------------------------------
    def to_svg(self) -> str:
        out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{self.height}" '
               f'viewBox="0 0 {self.width} {self.height}" font-family={quoteattr(SVG_FONT)}>',
               f'<rect x="0" y="0" width="{self.width}" height="{self.height}"{_svg_paint("fill", self.background)}/>']
        out += [getattr(self, "_svg_" + item[0])(*item[1:]) for item in self.items]
        out.append("</svg>")
        return "\n".join(out)

    @staticmethod
    def _svg_rect(x, y, w, h, fill, stroke, stroke_width):
        edge = _svg_paint("stroke", stroke) + f' stroke-width="{_n(stroke_width)}"' if stroke and stroke_width else ""
        return f'<rect x="{_n(x)}" y="{_n(y)}" width="{_n(w)}" height="{_n(h)}"{_svg_paint("fill", fill)}{edge}/>'

    @staticmethod
    def _svg_line(points, colour, width, dash):
        pts = " ".join(f"{_n(x)},{_n(y)}" for x, y in points)
        dashes = f' stroke-dasharray="{",".join(str(d * max(1, width / 1.5)) for d in DASHES[dash])}"' if dash else ""
        return (f'<polyline points="{pts}" fill="none"{_svg_paint("stroke", colour)} stroke-width="{_n(width)}"'
                f' stroke-linejoin="round"{dashes}/>')

    @staticmethod
    def _svg_marker(x, y, symbol, size, fill, stroke, stroke_width):
        paint = _svg_paint("fill", fill) + (_svg_paint("stroke", stroke) + f' stroke-width="{_n(stroke_width)}"'
                                            if stroke_width > 0 else "")
        if symbol == "circle":
            return f'<circle cx="{_n(x)}" cy="{_n(y)}" r="{_n(size / 2)}"{paint}/>'
        if symbol == "x":
            return Canvas._svg_line(_x_arms(x, y, size)[0], fill, max(2.0, size / 5), None) + \
                Canvas._svg_line(_x_arms(x, y, size)[1], fill, max(2.0, size / 5), None)
        pts = " ".join(f"{_n(px)},{_n(py)}" for px, py in _polygon(symbol, x, y, size))
        return f'<polygon points="{pts}"{paint}/>'

    @staticmethod
    def _svg_text(x, y, text, size, colour, anchor, bold, angle):
        turn = f' transform="rotate({_n(-angle)} {_n(x)} {_n(y)})"' if angle else ""
        weight = ' font-weight="bold"' if bold else ""
        return (f'<text x="{_n(x)}" y="{_n(y)}" font-size="{_n(size)}" text-anchor="{anchor}"'
                f' dominant-baseline="middle"{weight}{_svg_paint("fill", colour)}{turn}'
                f' xml:space="preserve">{escape(text)}</text>')

    # ---- PNG ----------------------------------------------------------------------------------
    def to_png(self, scale: float = 2.0) -> bytes:
        """The canvas as PNG bytes, `scale` pixels per unit (2: sharp on a slide)."""
        img = Image.new("RGBA", (max(1, round(self.width * scale)), max(1, round(self.height * scale))),
                        rgba(self.background))
        draw = ImageDraw.Draw(img)
        for item in self.items:
            getattr(self, "_png_" + item[0])(img, draw, scale, *item[1:])
        buf = io.BytesIO()
        img.convert("RGB").save(buf, format="PNG", optimize=False)
        return buf.getvalue()

    @staticmethod
    def _png_rect(img, draw, s, x, y, w, h, fill, stroke, stroke_width):
        box = [x * s, y * s, (x + max(w, 0)) * s, (y + max(h, 0)) * s]
        edge = rgba(stroke) if stroke and stroke_width else None
        draw.rectangle(box, fill=rgba(fill), outline=edge, width=max(1, round(stroke_width * s)) if edge else 0)

    @staticmethod
    def _png_line(img, draw, s, points, colour, width, dash):
        pts = [(x * s, y * s) for x, y in points]
        w = max(1, round(width * s))
        if not dash:
            draw.line(pts, fill=rgba(colour), width=w, joint="curve")
            return
        pattern = [d * s * max(1, width / 1.5) for d in DASHES[dash]]
        for a, b in zip(pts, pts[1:]):
            for p, q in _dashed(a, b, pattern):
                draw.line([p, q], fill=rgba(colour), width=w)

    @staticmethod
    def _png_marker(img, draw, s, x, y, symbol, size, fill, stroke, stroke_width):
        edge = rgba(stroke) if stroke_width > 0 else None
        w = max(1, round(stroke_width * s))
        body = rgba(fill) if rgba(fill)[3] else None  # a hollow ring: no fill (Pillow would paint it transparent)
        if symbol == "circle":
            r = size / 2 * s
            draw.ellipse([x * s - r, y * s - r, x * s + r, y * s + r], fill=body, outline=edge, width=w)
        elif symbol == "x":
            for arm in _x_arms(x, y, size):
                draw.line([(px * s, py * s) for px, py in arm], fill=rgba(fill), width=max(2, round(size / 5 * s)))
        else:
            draw.polygon([(px * s, py * s) for px, py in _polygon(symbol, x, y, size)], fill=body,
                         outline=edge, width=w)

    @staticmethod
    def _png_text(img, draw, s, x, y, text, size, colour, anchor, bold, angle):
        f = font(size * s, bold)
        where = {"start": "l", "middle": "m", "end": "r"}.get(anchor, "l") + "m"
        if not angle:
            draw.text((x * s, y * s), text, font=f, fill=rgba(colour), anchor=where)
            return
        w, h = max(1, math.ceil(f.getlength(text))) + 4, math.ceil(size * s * 1.5) + 4
        tile = Image.new("RGBA", (2 * w, h), (0, 0, 0, 0))  # the anchor point at the tile's centre
        ImageDraw.Draw(tile).text((w, h / 2), text, font=f, fill=rgba(colour), anchor=where)
        turned = tile.rotate(angle, expand=True, resample=Image.BICUBIC)
        img.alpha_composite(turned, (round(x * s - turned.width / 2), round(y * s - turned.height / 2)))


def _x_arms(x, y, size):
    r = size / 2.6
    return [(x - r, y - r), (x + r, y + r)], [(x - r, y + r), (x + r, y - r)]


def _polygon(symbol: str, x: float, y: float, size: float) -> list[tuple[float, float]]:
    r = size / 2
    if symbol == "diamond":
        return [(x, y - r), (x + r, y), (x, y + r), (x - r, y)]
    if symbol == "star":
        return [(x + (r if k % 2 == 0 else r * 0.45) * math.sin(k * math.pi / 5),
                 y - (r if k % 2 == 0 else r * 0.45) * math.cos(k * math.pi / 5)) for k in range(10)]
    return [(x - r, y - r), (x + r, y - r), (x + r, y + r), (x - r, y + r)]  # square, and anything else


def _dashed(a, b, pattern):
    """The drawn pieces of the segment a→b under a dash pattern [on, off, on, off, ...]."""
    length = math.dist(a, b)
    if length == 0:
        return []
    out, pos, k = [], 0.0, 0
    while pos < length:
        step = pattern[k % len(pattern)]
        if k % 2 == 0:
            end = min(length, pos + step)
            out.append(((a[0] + (b[0] - a[0]) * pos / length, a[1] + (b[1] - a[1]) * pos / length),
                        (a[0] + (b[0] - a[0]) * end / length, a[1] + (b[1] - a[1]) * end / length)))
        pos += step
        k += 1
    return out
