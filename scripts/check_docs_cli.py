"""Runs every `$ .venv/bin/roofline ...` line of the README and of the manual, and holds what it prints to the output
the page shows beneath it (the lines up to the next `$` line or the end of the code block): the same words, and
every number within TOLERANCE of the page's. A page that shows no output checks only that the command runs.

    python scripts/check_docs_cli.py [--write] ROOFLINE PORT PAGE...

ROOFLINE is the executable to run (scripts/check_readme_cli.sh passes a runtime-only venv's); a `serve` line starts
it in the background on PORT, and the `--url` lines' 127.0.0.1:8000 is rewritten to that port. After a line of `...`
in a page's output, each shown line may skip printed ones (an abridged table). Exits 1 naming each command whose
output drifted, line by line. With --write, a drifted output that has no `...` is replaced in its page by what was
printed (review the diff).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

# Figures move a little when a fit or a roof is refreshed; a documented figure further off than this is stale.
TOLERANCE = 0.05
COMMAND = re.compile(r"^\$ \.venv/bin/roofline (.+?)(?:\s+#.*)?$")
NUMBER = re.compile(r"^[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?")


def documented(pages: list[Path]) -> list[tuple[Path, str, list[str]]]:
    """(page, command, the output shown beneath it) of every roofline line, in order."""
    found = []
    for page in pages:
        lines = page.read_text().splitlines()
        for index, line in enumerate(lines):
            match = COMMAND.match(line)
            if not match:
                continue
            shown = []
            for following in lines[index + 1:]:
                if following.startswith(("$ ", "```")):
                    break
                shown.append(following)
            while shown and not shown[-1].strip():  # the blank line before the next command
                shown.pop()
            found.append((page, match.group(1), shown))
    return found


def tokens(line: str) -> list[str]:
    """Words and numbers, numbers split from their units (10us and 10 us alike), commas and padding ignored."""
    split = []
    for word in line.split():
        number = NUMBER.match(word)
        if number and number.group(0) != word:
            split += [number.group(0), word[number.end():]]
        else:
            split.append(word)
    return split


def _close(shown: str, printed: str) -> bool:
    if shown == printed:
        return True
    if not (NUMBER.fullmatch(shown) and NUMBER.fullmatch(printed)):
        return False
    a, b = float(shown.replace(",", "")), float(printed.replace(",", ""))
    return abs(a - b) <= TOLERANCE * max(abs(a), abs(b))


def drift(shown: list[str], printed: list[str]) -> list[str]:
    """How the printed output differs from the page's, one message per shown line it lacks. Line by line until a
    `...` line; after one, each shown line may skip printed ones (an abridged table), in order."""
    problems, at, abridged = [], 0, False
    for line in shown:
        if line.strip() == "...":
            abridged = True
            continue
        if abridged:
            found = next((i for i in range(at, len(printed)) if _same(line, printed[i])), None)
            if found is None:
                problems.append(f"  shown:   {line}\n  printed: no such line after the ones above")
                continue
            at = found + 1
            continue
        if at >= len(printed):
            problems.append(f"  shown:   {line}\n  printed: (nothing more)")
            continue
        if not _same(line, printed[at]):
            problems.append(f"  shown:   {line}\n  printed: {printed[at]}")
        at += 1
    return problems


def _same(shown: str, printed: str) -> bool:
    a, b = tokens(shown), tokens(printed)
    return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))


def serve(roofline: str, port: int, log: Path) -> subprocess.Popen:
    server = subprocess.Popen([roofline, "serve", "--port", str(port)], stdout=log.open("wb"), stderr=subprocess.STDOUT)
    for _ in range(150):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return server
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit(f"FAILED: roofline serve never answered /healthz\n{log.read_text()[-4000:]}")


def rewrite(page: Path, command: str, shown: list[str], printed: list[str]) -> None:
    """Puts `printed` in place of the output shown under the page's `command` line."""
    lines = page.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if (m := COMMAND.match(line.rstrip("\n"))) and m.group(1) == command)
    lines[at + 1:at + 1 + len(shown)] = [line + "\n" for line in printed]
    page.write_text("".join(lines))


def main(roofline: str, port: int, pages: list[Path], write: bool = False) -> int:
    server, failures = None, 0
    try:
        for page, command, shown in documented(pages):
            arguments = shlex.split(command)
            if arguments[0] == "serve":
                server = serve(roofline, port, Path("serve.log"))
                print(f"ok: roofline serve (answering on :{port})")
                continue
            arguments = [a.replace("http://127.0.0.1:8000", f"http://127.0.0.1:{port}") for a in arguments]
            run = subprocess.run([roofline, *arguments], capture_output=True, text=True, timeout=300)
            if run.returncode != 0:
                print(f"FAILED ({page.name}): roofline {command}\n{run.stderr}{run.stdout}", file=sys.stderr)
                failures += 1
                continue
            printed = run.stdout.rstrip("\n").splitlines()
            problems = drift(shown, printed) if shown else []
            if problems and write and not any(line.strip() == "..." for line in shown):
                rewrite(page, command, shown, printed)
                print(f"rewritten ({page.name}): roofline {command}")
                continue
            if problems:
                print(f"DRIFTED ({page.name}): roofline {command}\n" + "\n".join(problems), file=sys.stderr)
                failures += 1
                continue
            checked = f"{len(shown)} lines as shown" if shown else "runs"
            print(f"ok: roofline {command} ({checked})")
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
    return 1 if failures else 0


if __name__ == "__main__":
    arguments = sys.argv[1:]
    write = arguments[:1] == ["--write"]
    arguments = arguments[1:] if write else arguments
    if len(arguments) < 3:
        raise SystemExit(__doc__)
    sys.exit(main(arguments[0], int(arguments[1]), [Path(p) for p in arguments[2:]], write))
