"""The text normaliser's cost per call, per language, on a fixed set of agent replies.

    python bench/normalizer.py [--calls 300] [--alternations 3] [--code DIR ...] [--out FILE]

Every sentence a client sends goes through ``api.text.normalization.normalize`` on the gateway's
event loop before it reaches the engine, so its cost adds to time to first audio and takes loop time
from every other stream. The texts below are the kind of reply a voice agent sends (billing, travel,
health, addresses; English, Spanish, Portuguese, Dutch), each a few hundred characters.

Each checkout to compare (``--code DIR``: the root of another checkout, e.g. a ``git worktree`` of
an older commit; this checkout when none is given) is measured in a child process of its own, the
checkouts taking turns ``--alternations`` times so that a machine's drift falls on all of them. A
child warms up (the rules' tables, the regular expressions) and then times ``--calls`` calls per
language. The table gives, per checkout and language, the text's length and the median and p90 of
the per-call time over all turns; ``--out`` writes the same as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import machine, percentile  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

TEXTS = {
    "en": (
        "Your appointment with Dr. Patel is on Thu., Jan. 9 at 10:45 a.m.; please arrive 15 min. early. "
        "Your copay is $25 and the $1,150 deductible applies. Take 500 mg every 8 hrs, max 3,000 mg/day. "
        "Your order #4821 ships in 3-5 bus. days to 500 Oak St. Suite 200, Springfield, IL 62704. "
        "Call 1-800-555-0199 or text STOP to 55555. Data used: 12.4 GB of 15 GB (83%), renews 12/15."
    ),
    "es": (
        "Su reserva para 4 personas es el sáb. 14 de dic. a las 19:30 h en la Av. de la Constitución 15, "
        "3º izq., 28001 Madrid. El alquiler es de 850 €/mes + 75 € de gastos; el piso tiene 85 m², 3 hab. "
        "Llame al 900 123 456, opción 2. Su factura de $1.420,37 MXN vence el 20/12/2024; son 2.000.000 "
        "de clientes y el consumo subió un 8,3 %. Mañana: máx. 24 °C, mín. 15 °C."
    ),
    "pt": (
        "Sua reserva para 4 pessoas é no sáb., 14/12, às 19h30. O aluguel é R$ 1.850/mês + R$ 75 de "
        "condomínio; o apê tem 85 m², 3 qtos e 2 banheiros. Ligue para 0800 123 4567, opção 2. A conta "
        "de R$ 142,37 vence em 20/12/2024. Tome 1 comprimido de 8/8h. Parcelamos em até 12x sem juros; "
        "faturou R$ 2,5 bi em 2023, alta de 3%. CEP 01310-200."
    ),
    "nl": (
        "Uw reservering voor 4 personen is op za 14 dec om 19.30 uur. De huur is € 1.250 p/m excl. "
        "servicekosten; bel 020-123 4567 (ma t/m vr 9-17u). Uw energierekening van € 142,37 moet vóór "
        "20-12-2024 betaald zijn. Het verbruik was 245 kWh, 8,3% meer dan vorige maand. Morgen max. "
        "18 °C, min. 9 °C. Damrak 1, 1012 LG Amsterdam; NL91 ABNA 0417 1643 00."
    ),
}


def _worker(code: Path, calls: int) -> None:
    """In a child: imports the normaliser of the checkout at ``code`` and prints the per-call
    times (ms) per language as JSON."""
    sys.path.insert(0, str(code))
    from api.text.normalization import normalize

    times: dict[str, list[float]] = {}
    for lang, text in TEXTS.items():
        for _ in range(20):  # warm-up: caches, compiled patterns, num2words' modules
            normalize(text, lang)
        samples = []
        for _ in range(calls):
            start = time.perf_counter()
            normalize(text, lang)
            samples.append((time.perf_counter() - start) * 1000.0)
        times[lang] = samples
    print(json.dumps(times))


def _measure(code: Path, calls: int) -> dict[str, list[float]]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(code), "--calls", str(calls)]
    out = subprocess.run(cmd, env=env, cwd=code, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"normalizer worker for {code} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="timed calls per language and turn")
    parser.add_argument("--alternations", type=int, default=3, help="turns each checkout takes")
    parser.add_argument("--code", action="append", type=Path, default=[],
                        help="root of a checkout to measure (repeatable); this checkout when none")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)  # a child: time this checkout
    args = parser.parse_args(argv)
    if args.calls < 1 or args.alternations < 1:
        parser.error("--calls and --alternations must be at least 1")
    if args.worker is not None:
        _worker(args.worker, args.calls)
        return 0
    codes = [path.resolve() for path in args.code] or [ROOT]
    for code in codes:
        if not (code / "api" / "text" / "normalization.py").is_file():
            parser.error(f"{code} has no api/text/normalization.py")

    samples: dict[str, dict[str, list[float]]] = {str(code): {lang: [] for lang in TEXTS} for code in codes}
    for _ in range(args.alternations):
        for code in codes:
            for lang, times in _measure(code, args.calls).items():
                samples[str(code)][lang].extend(times)

    print(f"machine: {machine()}")
    print(f"{'checkout':<40} {'lang':<4} {'chars':>5} {'p50 ms':>8} {'p90 ms':>8}")
    results = []
    for code, by_lang in samples.items():
        for lang, times in by_lang.items():
            row = {"checkout": code, "language": lang, "chars": len(TEXTS[lang]), "calls": len(times),
                   "p50_ms": percentile(times, 50), "p90_ms": percentile(times, 90)}
            results.append(row)
            print(f"{code[-40:]:<40} {lang:<4} {row['chars']:>5} {row['p50_ms']:>8.3f} {row['p90_ms']:>8.3f}")
    if args.out is not None:
        args.out.write_text(json.dumps({"machine": machine(), "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
