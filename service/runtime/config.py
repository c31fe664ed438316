"""Settings from the environment (prefix ROOFLINE_)."""

from __future__ import annotations

import hashlib
from functools import lru_cache

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ROOFLINE_")

    database_url: str = "sqlite:///./data/roofline.db"
    # Comma-separated bearer tokens allowed to write, each optionally labelled: "alice=s3cret,ci=t0ken".
    api_tokens: str = ""
    migrate_on_start: bool = True
    log_level: str = "INFO"
    # Large enough for a 4,096-point sweep or a 64-operator fusion graph, small enough to stay harmless.
    max_body_bytes: int = 1_048_576

    def writer_tokens(self) -> dict[str, str]:
        """Token -> label. A bare token gets a label derived from its hash, never the token itself."""
        tokens: dict[str, str] = {}
        for entry in self.api_tokens.split(","):
            entry = entry.strip()
            if not entry:
                continue
            label, sep, token = entry.partition("=")
            if not sep:
                token, label = entry, "token-" + hashlib.sha256(entry.encode()).hexdigest()[:8]
            if token:
                tokens[token] = label
        return tokens


@lru_cache
def get_settings() -> Settings:
    return Settings()
