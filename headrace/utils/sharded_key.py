"""Beam's `apache_beam.utils.sharded_key`: a key with a shard id, to spread a hot key."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class ShardedKey:
    """A user key and the shard (bytes) it was spread to; groups as the pair."""

    key: Any
    shard_id: bytes

    def __repr__(self) -> str:
        return f"ShardedKey(key={self.key!r}, shard_id={self.shard_id!r})"
