"""GET /playground and its files over real HTTP: content types, the CSP, caching, no traversal."""

from __future__ import annotations

import re
import httpx
import pytest

from api.routes.playground import CONTENT_SECURITY_POLICY, ROOT, assets


def test_playground_redirects_to_its_folder(gateway) -> None:
    r = httpx.get(gateway.url + "/playground")
    assert r.status_code == 308
    assert r.headers["location"] == "playground/"  # relative: right behind a path-prefix proxy too


def test_index_and_every_file_it_loads_are_served_with_their_type_and_the_csp(gateway) -> None:
    index = httpx.get(gateway.url + "/playground/")
    assert index.status_code == 200
    assert index.headers["content-type"] == "text/html; charset=utf-8"
    refs = re.findall(r'(?:src|href)="([^"#:]+)"', index.text)
    assert {"style.css", "js/main.js", "icon.svg"} <= set(refs)
    # every module the page imports, transitively
    seen, todo = set(), ["js/main.js"]
    while todo:
        name = todo.pop()
        seen.add(name)
        r = httpx.get(f"{gateway.url}/playground/{name}")
        assert r.status_code == 200, name
        assert r.headers["content-type"] == "text/javascript; charset=utf-8"
        for dep in re.findall(r'from "\./([\w.]+)"', r.text):
            if f"js/{dep}" not in seen:
                todo.append(f"js/{dep}")
    assert len(seen) >= 8
    for name, ctype in (("style.css", "text/css; charset=utf-8"), ("icon.svg", "image/svg+xml")):
        assert httpx.get(f"{gateway.url}/playground/{name}").headers["content-type"] == ctype
    for r in (index, httpx.get(gateway.url + "/playground/js/main.js")):
        assert r.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["referrer-policy"] == "no-referrer"


def test_csp_is_strict() -> None:
    directives = dict(d.split(" ", 1) for d in CONTENT_SECURITY_POLICY.split("; "))
    assert directives["default-src"] == "'none'"
    for name in ("script-src", "style-src", "connect-src"):
        assert directives[name] == "'self'"  # no inline code, no eval, no third-party hosts
    assert directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in CONTENT_SECURITY_POLICY


def test_page_has_no_inline_script_style_or_secret() -> None:
    html = (ROOT / "index.html").read_text()
    assert not re.search(r"<script(?![^>]*\bsrc=)", html)  # every script is a file (CSP: 'self' only)
    assert "<style" not in html and " style=" not in html
    assert not re.search(r"<[^>]*\son[a-z]+=", html)  # no inline event handlers
    for text in (p.read_text() for p in ROOT.rglob("*") if p.suffix in (".html", ".js")):
        assert "api_key=" not in text  # the key never goes into a URL
        assert "localStorage" not in text  # only sessionStorage (the tab) or memory


def test_unchanged_file_is_a_304_with_its_etag(gateway) -> None:
    first = httpx.get(gateway.url + "/playground/js/player.js")
    etag = first.headers["etag"]
    again = httpx.get(gateway.url + "/playground/js/player.js", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert first.headers["cache-control"] == "no-cache"


@pytest.mark.parametrize("path", ["nope.js", "../app.py", "..%2Fapp.py", "js/../../routes/playground.py",
                                  "%2e%2e/settings.py", "js", "README.md"])
def test_only_shipped_files_are_served(gateway, path: str) -> None:
    r = httpx.get(f"{gateway.url}/playground/{path}")
    assert r.status_code == 404
    assert "import" not in r.text  # no source file came back, whoever answered


def test_the_file_list_is_what_ships() -> None:
    shipped = {p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*") if p.is_file()}
    assert set(assets()) == shipped  # every file is servable, and nothing else


def test_page_needs_no_credential_when_auth_is_on(auth_gateway) -> None:
    assert httpx.get(auth_gateway.url + "/playground/").status_code == 200
    assert httpx.get(auth_gateway.url + "/voices").status_code == 401
