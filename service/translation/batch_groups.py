"""What a batch's bulk paths (matmul_batches, model_batches) share: items grouped by a key, each group with enough
members built once, and one policy for a group that cannot be built: a refusal sends its members one by one (where
the per-item path words the error), and so does a defect, logged as the middleware logs one."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any, TypeVar

from service.runtime.observability import log_unexpected

Request = TypeVar("Request")
Group = TypeVar("Group")


def built_groups(items: Iterable[tuple[int, Request]], key: Callable[[Request], Hashable],
                 build: Callable[[Any, list[Request]], Group], min_members: int,
                 refusals: tuple[type[Exception], ...]) -> Iterator[tuple[Group, list[int]]]:
    """(group, its members' item indices, in the group's order) for every group built."""
    grouped: dict[Hashable, list[tuple[int, Request]]] = defaultdict(list)
    for index, request in items:
        grouped[key(request)].append((index, request))
    for group_key, members in grouped.items():
        if len(members) < min_members:
            continue
        try:
            group = build(group_key, [request for _, request in members])
        except refusals:
            continue
        except Exception as exc:  # a defect here must not cost the batch
            log_unexpected(exc)
            continue
        yield group, [index for index, _ in members]
