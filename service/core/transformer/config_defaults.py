"""What a config.json may leave out: the defaults transformers' config class of its family declares
(service/data/config_defaults.json, written by scripts/import_config_defaults.py from the pinned transformers), so
that a published config reads as transformers reads it. Each default a reader takes is recorded for the answer's
`defaults_applied` (but flags), with the class it came from."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

DEFAULTS_FILE = Path(__file__).resolve().parents[2] / "data" / "config_defaults.json"


@cache
def _table() -> dict[str, Any]:
    return json.loads(DEFAULTS_FILE.read_text())


class WithClassDefaults(Mapping[str, Any]):
    """A config whose absent keys read as its class's defaults; `taken` lists each default read, in order."""

    def __init__(self, config: Mapping[str, Any], family: str):
        table = _table()
        entry = table["families"].get(family, {"class": None, "defaults": {}})
        self._config, self._defaults = config, entry["defaults"]
        self._source = f"transformers {table['version']}'s {entry['class']} default"
        self.taken: dict[str, Any] = {}

    def __getitem__(self, key: str) -> Any:
        if key in self._config:
            return self._config[key]
        value = self._defaults[key]  # KeyError where neither has it, as a dict's
        self.taken.setdefault(key, value)
        return value

    def __contains__(self, key: object) -> bool:  # asking whether a key is there takes no default
        return key in self._config or key in self._defaults

    def __iter__(self) -> Iterator[str]:
        yield from self._config
        yield from (key for key in self._defaults if key not in self._config)

    def __len__(self) -> int:
        return len(self._config) + sum(1 for key in self._defaults if key not in self._config)

    def notes(self) -> list[str]:
        """The defaults taken, but a flag's: an absent flag reads as off wherever the class's default is off, and
        the families that default one on say so in docs/concepts.md."""
        return [f"{key} = {value!r} ({self._source})" for key, value in self.taken.items() if not isinstance(value, bool)]
