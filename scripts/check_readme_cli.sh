#!/usr/bin/env bash
# Runs every `$ .venv/bin/roofline ...` line of the README and of the manual (docs/) in a fresh virtual environment that has the
# runtime dependencies only (no test extras), against a fresh SQLite database, and holds what each prints to the output the
# page shows: the CLI must work after the README's `pip install -e .`, as documented. `serve` is started in the background;
# the `--url` lines talk to it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --constraint "$root/constraints.txt" --upgrade pip
"$work/venv/bin/pip" install --quiet --constraint "$root/constraints.txt" -e "$root"
if "$work/venv/bin/python" -c "import pytest" 2>/dev/null; then
    echo "the runtime-only venv has pytest: the check would not prove anything" >&2; exit 1
fi

export ROOFLINE_DATABASE_URL="sqlite:///$work/cli.db"
# The lines run in a scratch folder (their outputs land there), with the example files they read beside them.
mkdir -p "$work/tests/data" && cp "$root/tests/data/batch_example.jsonl" "$work/tests/data/"
cd "$work"
port=18765
# The README first, then the manual's pages in the order its navigation lists them.
pages=("$root/README.md")
for page in $(sed -nE 's/^  - [^:]+: ([a-z-]+\.md)$/\1/p' "$root/mkdocs.yml"); do pages+=("$root/docs/$page"); done
# Each line is run, and what it prints is held to the output the page shows beneath it (scripts/check_docs_cli.py).
"$work/venv/bin/python" "$root/scripts/check_docs_cli.py" "$work/venv/bin/roofline" "$port" "${pages[@]}"
