"""Torch reference backend on random checkpoints: frames/s and real-time factor at batch 1 and 8.

    python bench/engine_torch.py [extra bench/engine.py options, e.g. --frames 200 --torch-path fast]

The same measurement as ``bench/engine.py --backend torch --sizes tiny,full --concurrency 1,8``
(see that script for the definitions); kept as its own entry point for the model-core issue.
``--torch-path reference|fast`` picks the loop (default auto: fast on CUDA, reference on CPU);
bench/torch_fast.py times the two loops' steps side by side.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.engine import main  # noqa: E402

if __name__ == "__main__":
    main(["--backend", "torch", "--sizes", "tiny,full", "--concurrency", "1,8", *sys.argv[1:]])
