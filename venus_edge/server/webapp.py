"""The research page as an installable web app: its manifest, its icons (drawn here, no image files), and a
service worker that keeps the page shell (``SHELL_PATHS``) for a quick start and nothing else: no API response,
no session, no research result is ever cached (its fetch handler answers only for shell paths).

A browser registers a service worker only in a secure context: over https, or on ``localhost``/``127.0.0.1``.
Over a plain ``http://`` LAN address (``serve --lan``) the page works the same and "Add to Home screen" still
gives it an icon, without the worker.
"""

from __future__ import annotations

import functools
import json
import math
import struct
import zlib
from importlib.resources import files
from typing import Any

__all__ = ["ICON_SIZES", "SHELL_PATHS", "icon_png", "icon_svg", "manifest", "service_worker_js"]

#: What the service worker keeps: the page and what installing it needs, each served without a key.
SHELL_PATHS = ("/", "/manifest.webmanifest", "/icon.svg", "/icon-192.png", "/icon-512.png")
#: PNG icon sizes in pixels (the ones Android's install needs); each served at ``/icon-{size}.png``.
ICON_SIZES = (192, 512)
#: The page's accent (its ``--accent``) and background: the icon's and the installed app's colours.
ACCENT = "#2754c5"
BACKGROUND = "#fafaf8"
#: Where ``sw.js`` holds the shell's paths (``service_worker_js`` fills it in).
SHELL_BLOCK = "const SHELL = [];"


def manifest() -> dict[str, Any]:
    """The web app manifest (``/manifest.webmanifest``)."""
    return {
        "name": "venus-edge · local research",
        "short_name": "venus-edge",
        "description": "Research questions with the venus-edge agent on your own machine.",
        "start_url": "/",
        "scope": "/",
        "display": "standalone",
        "background_color": BACKGROUND,
        "theme_color": ACCENT,
        "icons": [{"src": "/icon.svg", "sizes": "any", "type": "image/svg+xml"}] + [
            {"src": f"/icon-{size}.png", "sizes": f"{size}x{size}", "type": "image/png", "purpose": "any maskable"}
            for size in ICON_SIZES],
    }


def service_worker_js() -> str:
    """``/sw.js``: the worker's script with the shell's paths filled in."""
    script = files("venus_edge.server").joinpath("static/sw.js").read_text(encoding="utf-8")
    if SHELL_BLOCK not in script:
        raise RuntimeError(f"the service worker has lost its shell list {SHELL_BLOCK!r}")
    return script.replace(SHELL_BLOCK, f"const SHELL = {json.dumps(list(SHELL_PATHS))};")


def icon_svg() -> str:
    """The icon as SVG: the page's accent square with a white planet and its shadow (the same drawing as the PNGs)."""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 100 100">'
            f'<rect width="100" height="100" rx="18" fill="{ACCENT}"/>'
            f'<circle cx="50" cy="50" r="{_PLANET_R * 100:g}" fill="#ffffff"/>'
            f'<circle cx="{(0.5 + _SHADOW_DX) * 100:g}" cy="{(0.5 - _SHADOW_DX) * 100:g}" r="{_PLANET_R * 100:g}" '
            f'fill="{ACCENT}" fill-opacity="0.35"/></svg>')


# The drawing, in fractions of the icon's side: a planet in the middle (inside the 80 % safe zone of a maskable
# icon) and a disc of shadow shifted up-right over it.
_PLANET_R = 0.26
_SHADOW_DX = 0.1


@functools.lru_cache(maxsize=len(ICON_SIZES))
def icon_png(size: int) -> bytes:
    """The icon as a ``size`` x ``size`` PNG (RGB, full bleed, so that a maskable crop keeps the planet).

    Raises:
        ValueError: ``size`` is not one of ``ICON_SIZES``.
    """
    if size not in ICON_SIZES:
        raise ValueError(f"no {size}px icon; the sizes are {ICON_SIZES}")
    accent = _rgb(ACCENT)
    shade = tuple(round(a + (255 - a) * 0.65) for a in accent)  # the shadow: accent at 35 % over white
    centre = size / 2
    rows = []
    for y in range(size):
        row = bytearray(b"\x00")  # filter type 0 (none)
        for x in range(size):
            px, py = x + 0.5, y + 0.5
            planet = _coverage(px - centre, py - centre, _PLANET_R * size)
            shadow = planet * _coverage(px - centre - _SHADOW_DX * size, py - centre + _SHADOW_DX * size,
                                        _PLANET_R * size)
            lit = planet - shadow
            row += bytes(round(a * (1 - planet) + 255 * lit + s * shadow) for a, s in zip(accent, shade))
        rows.append(bytes(row))
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(b"".join(rows), 9))
            + _chunk(b"IEND", b""))


def _coverage(dx: float, dy: float, radius: float) -> float:
    """How much of the pixel at (``dx``, ``dy``) from a disc's centre the disc covers (a one-pixel soft edge)."""
    return min(1.0, max(0.0, radius - math.hypot(dx, dy) + 0.5))


def _rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
