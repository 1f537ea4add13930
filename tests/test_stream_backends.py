"""The stream backends (local SQLite and Redis Streams) behave alike: offsets 1, 2, 3 per stream
however many writers append, a reader after any offset gets every later entry once and in order, a
blocking read wakes on the next append, retention trims the oldest entries, and a superseded entry
voids what it names for a reader assembling the answer."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from agent_worker.activities.agent.streaming import TurnStream
from agent_worker.activities.stores.redis_streams import RedisStreamBackend
from agent_worker.activities.stores.state import build_stream_backend
from agent_worker.activities.stores.streams import SqliteStreamBackend, StreamBackend
from agent_worker.schemas.config import ConfigError, WorkerConfig
from agent_worker.schemas.streams import StreamEntry, assemble_text, voided

from tests.helpers.redis_server import redis_server


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(params=["local", "redis"])
def make_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], StreamBackend]]:
    """Opens the backend under test (each call: another client of the same store, as another
    process would be)."""
    opened: list[StreamBackend] = []

    def make() -> StreamBackend:
        if request.param == "local":
            store: StreamBackend = SqliteStreamBackend(tmp_path / "streams.db", retention=50)
        else:
            url = request.getfixturevalue("redis_url")
            store = RedisStreamBackend(url, retention=50, prefix=f"test:{tmp_path.name}:")
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def backend(make_backend: Callable[[], StreamBackend]) -> StreamBackend:
    return make_backend()


def token(text: str, turn: int = 1, attempt: int = 1, call: int = 0) -> StreamEntry:
    return StreamEntry(task_id="t", turn=turn, attempt=attempt, call=call, kind="token", data={"text": text})


def test_offsets_are_contiguous_and_reads_resume_after_any_offset(backend: StreamBackend) -> None:
    """Appends get 1..N in order; a read after k answers k+1..N, each once; another run chain of
    the same task id is another stream."""
    assert backend.append("t", "c1", [token(str(i)) for i in range(5)]) == [1, 2, 3, 4, 5]
    assert backend.append("t", "c1", [token("5")]) == [6]
    assert backend.append("t", "c2", [token("other")]) == [1]
    for after in range(7):
        got = backend.read("t", "c1", after=after)
        assert [e.offset for e in got] == list(range(after + 1, 7))
        assert [e.data["text"] for e in got] == [str(i) for i in range(after, 6)]
    assert [e.offset for e in backend.read("t", "c1", after=2, limit=2)] == [3, 4]
    assert [e.data["text"] for e in backend.read("t", "c2")] == ["other"]


def test_the_local_backend_s_batch_append_keeps_each_stream_s_retention(tmp_path: Path) -> None:
    """``append_many`` (the live-event tap's batches) gives each stream the offsets ``append`` would,
    after what it holds already, and a stream's retention still applies."""
    backend = SqliteStreamBackend(tmp_path / "streams.db", retention=4)
    backend.append("a", None, [token("a0")])
    got = backend.append_many(
        {("a", None): [token("a1"), token("a2")], ("b", "c"): [token(f"b{i}") for i in range(6)]}
    )
    assert got == {("a", None): [2, 3], ("b", "c"): [1, 2, 3, 4, 5, 6]}
    assert [e.data["text"] for e in backend.read("a", None)] == ["a0", "a1", "a2"]
    assert [(e.offset, e.data["text"]) for e in backend.read("b", "c")] == [
        (3, "b2"),
        (4, "b3"),
        (5, "b4"),
        (6, "b5"),
    ]
    assert backend.append_many({("a", None): []}) == {}


def test_appending_to_several_streams_at_once_gives_the_offsets_append_would(
    backend: StreamBackend,
) -> None:
    """On every backend, ``append_many`` continues each stream after what it holds, answers only
    the streams it was given entries for, and its entries read back in order."""
    backend.append("a", None, [token("a0")])
    got = backend.append_many(
        {("a", None): [token("a1"), token("a2")], ("b", "c"): [token("b0")], ("e", None): []}
    )
    assert got == {("a", None): [2, 3], ("b", "c"): [1]}
    assert [(e.offset, e.data["text"]) for e in backend.read("a", None)] == [(1, "a0"), (2, "a1"), (3, "a2")]
    assert [e.data["text"] for e in backend.read("b", "c")] == ["b0"]
    assert backend.read("e", None) == []
    assert backend.append_many({}) == {}


def test_concurrent_writers_interleave_without_gap_or_duplicate(
    make_backend: Callable[[], StreamBackend],
) -> None:
    """Four writers (each its own client of the store) appending batches to one stream: every
    offset 1..N is taken exactly once and each writer's entries keep their order."""
    clients = [make_backend() for _ in range(4)]
    backend = clients[0]

    def write(writer: int) -> None:
        for batch in range(4):
            clients[writer].append("t", "c", [token(f"{writer}:{batch}:{i}") for i in range(3)])

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    entries = backend.read("t", "c", limit=1000)
    assert [e.offset for e in entries] == list(range(1, 49))
    for writer in range(4):
        mine = [e.data["text"] for e in entries if e.data["text"].startswith(f"{writer}:")]
        assert mine == [f"{writer}:{b}:{i}" for b in range(4) for i in range(3)]


def test_a_blocking_read_wakes_on_the_next_append(backend: StreamBackend) -> None:
    """A reader waiting after the last offset gets the next entry as soon as it is appended."""
    backend.append("t", "c", [token("first")])
    timer = threading.Timer(0.3, lambda: backend.append("t", "c", [token("second")]))
    started = time.monotonic()
    timer.start()
    got = backend.read("t", "c", after=1, block_ms=3000)
    waited = time.monotonic() - started
    assert [e.data["text"] for e in got] == ["second"] and [e.offset for e in got] == [2]
    assert 0.2 < waited < 2.0
    assert backend.read("t", "c", after=2, block_ms=100) == []


def test_retention_trims_the_oldest_entries(backend: StreamBackend) -> None:
    """Past the retention the oldest entries go (Redis trims approximately, in whole nodes); the
    newest stay, and their offsets tell a reader how many it missed."""
    for _ in range(10):
        backend.append("t", "c", [token(".") for _ in range(100)])
    entries = backend.read("t", "c", limit=10_000)
    assert entries[-1].offset == 1000
    assert 50 <= len(entries) < 1000
    assert [e.offset for e in entries] == list(range(1001 - len(entries), 1001))


def test_superseded_entries_void_what_they_name() -> None:
    """A retried attempt voids its turn's earlier attempts (even entries a stale attempt wrote
    after it); a call's superseded entry voids that call's text so far; the answer is the last
    call's live text."""
    entries = [
        token("Hel", attempt=1),
        token("lo", attempt=1),
        StreamEntry(turn=1, attempt=2, kind="superseded", data={"reason": "retry"}),
        token("wor", attempt=2),
        token("stale", attempt=1),
        StreamEntry(turn=1, attempt=2, kind="superseded", data={"call": 0, "model": "a"}),
        token("Hello ", attempt=2),
        token("world", attempt=2),
    ]
    entries = [e.model_copy(update={"offset": n}) for n, e in enumerate(entries, 1)]
    assert voided(entries) == {1, 2, 4, 5}
    assert assemble_text(entries) == "Hello world"
    later_call = token("next", attempt=2, call=1).model_copy(update={"offset": 9})
    assert assemble_text([*entries, later_call]) == "next"


async def test_a_store_that_is_down_never_fails_or_holds_up_the_turn(tmp_path: Path) -> None:
    """A turn's writer over a Redis nobody listens on: emits return at once, closing waits at most
    its bound, and the lost entries are counted."""
    from agent_worker.cli.devserver import free_port

    stream = TurnStream(RedisStreamBackend(f"redis://127.0.0.1:{free_port()}/0"), "t", "c", 1)
    started = time.monotonic()
    for i in range(100):
        stream.emit("token", {"text": f"{i} "})  # words: none is held back for the next
    assert time.monotonic() - started < 0.1
    await asyncio.sleep(0.2)
    await stream.close()
    assert time.monotonic() - started < 5
    assert stream.dropped == 100


def test_the_factory_builds_the_configured_backend(tmp_path: Path, redis_url: str) -> None:
    """stream_backend picks the backend; redis needs its URL (named in the error); none builds none."""
    assert isinstance(build_stream_backend(WorkerConfig(data_dir=tmp_path)), SqliteStreamBackend)
    assert build_stream_backend(WorkerConfig(data_dir=tmp_path, stream_backend="none")) is None
    redis = WorkerConfig.from_env(
        {"AGENT_WORKER_STREAM_BACKEND": "redis", "AGENT_WORKER_STREAM_URL": redis_url}
    )
    assert isinstance(build_stream_backend(redis), RedisStreamBackend)
    with pytest.raises(ConfigError, match="AGENT_WORKER_STREAM_URL"):
        WorkerConfig.from_env({"AGENT_WORKER_STREAM_BACKEND": "redis"})


def test_clients_opening_a_new_local_stream_file_at_once_all_get_in(tmp_path: Path) -> None:
    """Eight clients (a worker's turn streams, its live-event tap, readers) opening a new SQLite
    stream file at the same moment all append: none is refused with "database is locked" while the
    file switches to WAL (before, about one in twenty such starts here lost a client)."""
    errors: list[BaseException] = []

    def first_append(path: Path, writer: int) -> None:
        try:
            SqliteStreamBackend(path).append("t", "c", [token(f"{writer}")])
        except BaseException as err:
            errors.append(err)

    for attempt in range(40):
        path = tmp_path / f"streams-{attempt}.db"
        threads = [threading.Thread(target=first_append, args=(path, w)) for w in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors, errors[0]
        assert len(SqliteStreamBackend(path).read("t", "c", limit=100)) == 8
