"""One self-contained HTML page: the scaffolding every ``report.html`` shares.

:func:`page` wraps a body in the one head (doctype, language, viewport, the
title, an inline style); :func:`esc` is how any text gets into a page
(:func:`gpu_dedup.edge.clean`: no credential of a URL, names that are not
valid UTF-8 escaped; then HTML-escaped, quotes included); :func:`write_page`
writes it (UTF-8, anything unencodable backslash-escaped). :func:`table_css`
is the plain style of the pages that are mostly tables (``substr``'s, the
contamination report's). Pages load nothing and run no script.
"""
from __future__ import annotations

from .edge import clean

#: ``html.escape(..., quote=True)``'s replacements (the module ``html``
#: loads its table of entities, which a page never needs)
_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;",
                          "'": "&#x27;"})


def esc(text) -> str:
    """``text`` (any object, as ``str``) cleaned and HTML-escaped."""
    return clean(text).translate(_ESCAPES)


def table_css(pre_width_em: int) -> str:
    """The style of a page of tables and passages; ``<pre>`` blocks are at
    most ``pre_width_em`` wide."""
    return ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}\n"
            "td,th{border:1px solid #ccc;padding:4px;vertical-align:top}pre{white-space:pre-wrap;\n"
            f"max-width:{pre_width_em}em;margin:0}}")


def page(title: str, body: str, css: str) -> str:
    """The whole page: ``title`` (escaped here), ``body`` (HTML, as given)
    and the inline style sheet ``css``."""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{esc(title)}</title>\n"
            f"<style>{css}</style></head>\n"
            f"<body>{body}</body></html>\n")


def write_page(path: str, text: str) -> None:
    """Write a page to ``path`` as UTF-8."""
    with open(path, "w", encoding="utf-8", errors="backslashreplace") as f:
        f.write(text)


__all__ = ["esc", "page", "write_page", "table_css"]
