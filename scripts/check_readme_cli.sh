#!/usr/bin/env bash
# Runs every `$ .venv/bin/roofline ...` line of the README and of the manual (docs/) in a fresh virtual environment that has the
# runtime dependencies only (no test extras), against a fresh SQLite database: the CLI must work after
# the README's `pip install -e .`. `serve` is started in the background; the `--url` lines talk to it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
server=""
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$work"' EXIT

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
grep -hE '^\$ \.venv/bin/roofline ' "${pages[@]}" | sed -E 's/^\$ \.venv\/bin\/roofline //; s/ +#.*$//' | while read -r line; do
    # shellcheck disable=SC2086
    set -- $line
    case "$1" in
    serve)
        "$work/venv/bin/roofline" serve --port "$port" >"$work/serve.log" 2>&1 &
        echo $! >"$work/server.pid"
        up=""
        for _ in $(seq 1 150); do
            if "$work/venv/bin/python" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/healthz', timeout=1)" 2>/dev/null; then
                up=1; break
            fi
            sleep 0.2
        done
        [ -n "$up" ] || { echo "FAILED: roofline serve never answered /healthz" >&2; cat "$work/serve.log" >&2; exit 1; }
        echo "ok: roofline serve (answering on :$port)"
        continue ;;
    esac
    line="${line//http:\/\/127.0.0.1:8000/http://127.0.0.1:$port}"
    # shellcheck disable=SC2086
    if ! "$work/venv/bin/roofline" $line >"$work/out.txt" 2>"$work/err.txt"; then
        echo "FAILED: roofline $line" >&2; cat "$work/err.txt" "$work/out.txt" >&2
        [ -f "$work/serve.log" ] && tail -20 "$work/serve.log" >&2
        exit 1
    fi
    echo "ok: roofline $line ($(wc -l <"$work/out.txt") lines)"
done
[ -f "$work/server.pid" ] && kill "$(cat "$work/server.pid")" 2>/dev/null || true
