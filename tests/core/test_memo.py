"""ByIdentity: catalog objects keyed by identity, never by a reused id."""

from dataclasses import dataclass

from service.core.memo import ByIdentity


@dataclass(frozen=True)
class Thing:
    value: int


def test_the_same_object_hits_an_equal_one_does_not():
    calls = []
    doubled = ByIdentity(lambda thing, factor=2: calls.append(thing) or thing.value * factor, objects=1)
    first = Thing(3)
    assert doubled(first) == 6 and doubled(first) == 6 and calls == [first]
    assert doubled(Thing(3)) == 6 and len(calls) == 2  # equal, but another object: computed again
    assert doubled(first, 5) == 15 and doubled(first, factor=5) == 15 and len(calls) == 4  # other arguments, by value


def test_a_freed_objects_id_reused_by_another_never_hits():
    """An entry holds its object, so its id stays taken while the entry lives; once the bound clears the memo,
    CPython hands the freed ids to new objects, and each new object still gets its own answer."""
    memo = ByIdentity(lambda thing: thing.value, objects=1, limit=2)
    seen = set()
    for value in range(200):
        thing = Thing(value)
        seen.add(id(thing))
        assert memo(thing) == value
        del thing
    assert len(seen) < 200  # ids were reused


def test_errors_are_raised_and_not_kept_and_the_memo_is_bounded():
    attempts = []

    def fragile(thing):
        attempts.append(thing)
        if len(attempts) == 1:
            raise ValueError("first time")
        return thing.value

    memo = ByIdentity(fragile, objects=1, limit=4)
    thing = Thing(1)
    try:
        memo(thing)
    except ValueError:
        pass
    assert memo(thing) == 1 and len(attempts) == 2
    held = [Thing(i) for i in range(10)]
    assert [memo(t) for t in held] == list(range(10)) and len(memo._entries) <= 4


def test_deeply_frozen_tells_a_mutable_field_apart():
    from dataclasses import dataclass
    from types import MappingProxyType

    from service.core.memo import deeply_frozen

    @dataclass(frozen=True)
    class Holder:
        value: object

    assert deeply_frozen(Holder((1, "a", MappingProxyType({"k": 2.0}))))
    assert not deeply_frozen(Holder({"k": 2.0}))  # a dict can change under a memo keyed by identity
    assert not deeply_frozen(Holder([1]))
    assert not deeply_frozen(Holder(MappingProxyType({"k": [1]})))


def test_every_object_a_memo_keys_by_identity_is_deeply_frozen():
    """The golden requests (every analysis, on every kind of device, roofs measured and nominal) fill the memos;
    every object they are keyed by must be immutable all the way down, or an identity key could answer stale."""
    from service.core.memo import MEMOS, deeply_frozen
    from tests.golden.record import answer_hashes, load_requests

    answer_hashes(load_requests())
    held = [obj for memo in list(MEMOS) for obj in memo.held()]
    assert len(held) > 50
    kinds = {type(obj).__name__ for obj in held}
    assert {"DeviceSpec", "MeasuredRoofs", "Architecture"} <= kinds
    assert [type(obj).__name__ for obj in held if not deeply_frozen(obj)] == []


def test_an_evaluator_keeps_two_generations_of_rows(monkeypatch):
    """Evaluator.evaluate keeps what it evaluated in two generations of ROW_CACHE_GENERATION rows: never more than
    two generations' worth, and a row asked for again after its generation turned (what a plan's tails do with the
    rows its search evaluated) is served from the older one and promoted, not evaluated again."""
    from service.core.operators.pointwise import elementwise_cost
    from service.core.transformer import analysis
    from service.core.transformer.analysis import Evaluator
    from service.core.transformer.layers import Row
    from service.persistence.catalog import nominal_device

    monkeypatch.setattr(analysis, "ROW_CACHE_GENERATION", 4)
    evaluator = Evaluator(nominal_device("nvidia-h100-sxm"))
    evaluated = []
    real = evaluator._evaluate
    monkeypatch.setattr(evaluator, "_evaluate", lambda row, group, layers: evaluated.append(row.name) or real(
        row, group, layers))
    rows = [Row(f"row{i}", "elementwise", 1, elementwise_cost(op="add", shape=[i + 1, 64])) for i in range(10)]
    first = evaluator.evaluate(rows[0], "layers", 1)
    for row in rows[1:6]:  # row0-row3 fill a generation; row4 turns it, row5 joins the new one
        evaluator.evaluate(row, "layers", 1)
    assert len(evaluator._rows) + len(evaluator._older_rows) <= 8
    assert evaluator.evaluate(rows[0], "layers", 1) is first  # from the older generation
    assert evaluated.count("row0") == 1
    for row in rows:
        evaluator.evaluate(row, "layers", 1)
    assert len(evaluator._rows) <= 4 and len(evaluator._older_rows) <= 4
