"""Container health check: exit 0 when the gateway in this container answers 200 on ``/ready``.

Used by the image's HEALTHCHECK and docker-compose.yml (slim images have no curl). Standard library
only, so it runs with any Python. The port and scheme follow the gateway's own settings
(``GEPARD_PORT``; https when ``GEPARD_TLS_CERTFILE`` is set, without certificate checks: this is
loopback, and the certificate names the public host, not 127.0.0.1).

    python deploy/docker/healthcheck.py            # GET /ready
    python deploy/docker/healthcheck.py /health    # another path (liveness)
"""

from __future__ import annotations

import os
import ssl
import sys
import urllib.error
import urllib.request

TIMEOUT_S = 4.0


def url(path: str) -> str:
    scheme = "https" if os.environ.get("GEPARD_TLS_CERTFILE", "").strip() else "http"
    port = os.environ.get("GEPARD_PORT", "").strip() or "8000"
    return f"{scheme}://127.0.0.1:{port}{path}"


def main(argv: list[str]) -> int:
    target = url(argv[1] if len(argv) > 1 else "/ready")
    context = ssl._create_unverified_context() if target.startswith("https") else None  # loopback only
    try:
        with urllib.request.urlopen(target, timeout=TIMEOUT_S, context=context) as response:
            status = response.status
    except urllib.error.HTTPError as exc:  # 503 while starting or draining
        status = exc.code
    except (OSError, ValueError) as exc:  # not listening yet, timeout, bad port
        print(f"{target}: {exc}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"{target}: HTTP {status}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
