"""Build-time check: this image can compile what torch.compile and Triton compile at run time.

vLLM runs part of every sampling step through ``torch.compile`` even with ``enforce_eager`` (its
log-probability ranking), and the GPU paths compile more: Inductor needs a C++ compiler for CPU
kernels, and Triton builds its CUDA launcher with a C compiler against ``Python.h``. A runtime base
image has none of these, and the gateway then dies in its warm-up with
``InvalidCxxCompiler: No working C++ compiler found``. The Dockerfile runs this right after the
install, so a base image without them fails the build, not the first start.

    python deploy/docker/compiler_check.py     # exit 0, or 1 naming what is missing
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig


def missing() -> list[str]:
    """What the image lacks, in words an operator can act on (empty: nothing)."""
    problems: list[str] = []
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        problems.append("no C compiler (cc/gcc) on PATH: Triton cannot build its launcher (install gcc libc6-dev)")
    if shutil.which("g++") is None:
        problems.append("no C++ compiler (g++) on PATH: torch.compile's Inductor cannot build CPU kernels (install g++)")
    include = sysconfig.get_paths()["include"]
    if not os.path.isfile(os.path.join(include, "Python.h")):
        problems.append(f"no Python.h in {include}: Triton cannot build its launcher (install python3-dev)")
    if not problems:
        problems.extend(_compile_one())
    return problems


def _compile_one() -> list[str]:
    """Compile and run one tiny function the way vLLM's sampler does (Inductor, CPU tensors)."""
    try:
        import torch

        double_plus_one = torch.compile(lambda x: x * 2 + 1, backend="inductor")
        got = double_plus_one(torch.ones(4)).sum().item()
    except Exception as exc:  # anything here is the failure the gateway would hit in its warm-up
        return [f"torch.compile failed: {type(exc).__name__}: {exc}"]
    return [] if got == 12.0 else [f"torch.compile computed {got}, not 12.0"]


def main() -> int:
    problems = missing()
    for problem in problems:
        print(f"compiler_check: {problem}", file=sys.stderr)
    if not problems:
        print("compiler_check: C and C++ compilers, Python.h and torch.compile all work")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
