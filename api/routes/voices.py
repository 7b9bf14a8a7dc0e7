"""Voices API (issue 5): routes are added by voices routes module; none yet."""

from __future__ import annotations


def routes() -> list:
    return []
