"""The newest releases against the pins (constraints.txt).

    python scripts/newest_releases.py check   # the suite on SQLite with the newest releases; lists what moved and broke
    python scripts/newest_releases.py lock    # writes constraints.txt from the newest releases (then run make test)

Both build a throwaway venv (.venv-newest) and install the project with its test and dev extras from pyproject.toml's
ranges alone, ignoring constraints.txt. torch stays the Makefile's CPU build (TORCH_CPU): PyPI's newest Linux torch
is the CUDA build, gigabytes the cross-checks do not need. `check` never changes the pins and exits with pytest's
status, so a caller decides whether it blocks (CI runs it after the suite and only reports it).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-newest"
CONSTRAINTS = ROOT / "constraints.txt"
HEADER_END = "# torch is pinned in the Makefile"


def run(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=ROOT, check=True, **kwargs)


def makefile_value(name: str) -> str:
    found = re.search(rf"^{name} \??:?= *(.+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    if found is None:
        raise SystemExit(f"the Makefile defines no {name}")
    return found.group(1).strip()


def build_venv() -> Path:
    shutil.rmtree(VENV, ignore_errors=True)
    run(sys.executable, "-m", "venv", str(VENV))
    pip = VENV / "bin" / "pip"
    run(str(pip), "install", "--quiet", "--upgrade", "pip")
    run(str(pip), "install", "--quiet", "-e", ".[test,dev]")
    torch = makefile_value("TORCH_CPU")
    if subprocess.run([str(pip), "install", "--quiet", torch], cwd=ROOT).returncode != 0:
        subprocess.run([str(pip), "install", "--quiet", "--retries", "1", "--timeout", "20", torch,
                        "--extra-index-url", makefile_value("TORCH_CPU_INDEX")], cwd=ROOT)
    subprocess.run([str(pip), "install", "--quiet", makefile_value("TORCH_TEST_PACKAGES")], cwd=ROOT)
    return VENV / "bin" / "python"


def pins(text: str) -> dict[str, str]:
    """name (normalised) -> version, of `name==version` lines."""
    found = {}
    for line in text.splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            found[re.sub(r"[-_.]+", "-", name).lower()] = version.strip()
    return found


def frozen(python: Path) -> tuple[str, str]:
    """(pip's version, the venv's `pip freeze` without the project and torch)."""
    pip_version = run(str(python), "-m", "pip", "--version", capture_output=True, text=True).stdout.split()[1]
    lines = run(str(python), "-m", "pip", "freeze", "--exclude-editable", capture_output=True, text=True).stdout
    kept = [line for line in lines.splitlines() if line and not line.lower().startswith("torch==")]
    return pip_version, "\n".join(kept) + "\n"


def moved(pinned: dict[str, str], newest: dict[str, str]) -> list[str]:
    lines = [f"  {name}: {pinned.get(name, 'not pinned')} -> {version}" for name, version in sorted(newest.items())
             if pinned.get(name) != version]
    lines += [f"  {name}: {version} -> no longer installed" for name, version in sorted(pinned.items())
              if name not in newest]
    return lines


def main(mode: str) -> int:
    python = build_venv()
    pip_version, freeze = frozen(python)
    text = CONSTRAINTS.read_text()
    newest = pins(f"pip=={pip_version}\n{freeze}")
    changes = moved(pins(text), newest)
    print("newest releases against constraints.txt:")
    print("\n".join(changes) if changes else "  none: the pins are the newest releases")
    if mode == "lock":
        header = text[:text.index(HEADER_END)] + text[text.index(HEADER_END):].splitlines()[0] + "\n"
        CONSTRAINTS.write_text(f"{header}pip=={pip_version}\n{freeze}")
        print("constraints.txt rewritten: run `make test` before committing it")
        return 0
    result = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=ROOT)
    verdict = "passes" if result.returncode == 0 else f"FAILS (pytest exit {result.returncode}; failures listed above)"
    print(f"the suite with the newest releases {verdict}")
    return result.returncode


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("check", "lock"):
        raise SystemExit(__doc__)
    sys.exit(main(sys.argv[1]))
