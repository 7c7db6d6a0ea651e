"""The Pythonic Client against a real server, and LocalClient in process: the same calls."""

import json

import pytest

from conftest import Server
from hf3fs_meta import Client, InvalidArgumentError, LocalClient, MetadataError


def exercise(client: Client) -> None:
    """The calls every Client has, with the answers of the protocol's state model."""
    assert client.ensure_initialized(3, 4) == "Rank 3 initialized with 4 pages"
    assert client.initialize(3, 99) == "Rank 3 initialized with 99 pages"  # idempotent, echoes the count
    assert client.initialize(9, 0, "scheduler") == "Scheduler role does not require initialization"
    assert client.allocate(3, [("a", ""), "b", ["c", "p"]]) == [0, 1, 2]
    client.confirm_write(3, [("a", 0), ["b", 1]], pages_to_release=[2])
    assert client.batch_exists(["a", "b", "c"]) == [True, True, False]
    assert client.get_locations(3, ("a", "c")) == [0, None]
    assert client.allocate(3, ["d", "e"]) == [3, 2]
    assert client.allocate(3, ["f"]) == [-1]
    with pytest.raises(MetadataError) as caught:
        client.allocate(4, ["a"])
    assert (caught.value.code, caught.value.rank) == ("rank_not_initialized", 4)
    # After a clear the server forgets rank 3; the client registered it and restores it.
    client.clear()
    assert client.batch_exists(["a"]) == [False]
    assert client.allocate(3, ["g"]) == [0]


def test_client_against_a_server(server):
    exercise(Client(server.url, timeout=2.5, attempts=2, deadline=5))
    assert server.post("/keys/batch_exists", {"keys": ["g"]}) == (200, {"exists": [False]})
    assert server.post("/keys/get_locations", {"rank": 3, "keys": ["g"]}) == (200, {"locations": [None]})


def test_local_client_needs_no_server():
    client = LocalClient()
    assert isinstance(client, Client)
    exercise(client)
    # Each LocalClient has its own state.
    assert LocalClient().batch_exists(["a"]) == [False]


def test_register_rank_sends_nothing_until_the_server_says_not_initialized(server):
    client = Client(server.url)
    client.register_rank(2, 8)
    assert server.requests_answered("/rank/{rank}/initialize", 200) == 0
    assert client.allocate(2, ["k"]) == [0]
    assert server.requests_answered("/rank/{rank}/initialize", 200) == 1


STATE_FIGURES = ("keys_complete", "keys_incomplete", "keys_leased", "key_records", "evicted_keys", "deleted_keys",
                 "reclaimed_keys", "reclaimed_allocated_pages", "reclaimed_orphaned_pages")


def save(client: Client, rank: int, key: str) -> int:
    [page] = client.allocate(rank, [key])
    client.confirm_write(rank, [(key, page)])
    return page


def test_delete_keys_and_stats_in_process():
    client = LocalClient()
    client.ensure_initialized(0, 3)
    save(client, 0, "a")
    save(client, 0, "b")
    assert client.allocate(0, ["c"]) == [2]
    assert client.delete_keys(["a", "x", "a"]) == [True, False, False]  # the repeat finds nothing left
    assert client.batch_exists(["a", "b"]) == [False, True]
    stats = client.stats()
    assert set(stats) == {"ranks", *STATE_FIGURES}
    assert stats["ranks"] == {0: dict(num_pages=3, free=1, allocated=1, mapped=1, orphaned=0, draining=0,
                                      kept_on_release=0)}
    assert (stats["keys_complete"], stats["keys_incomplete"], stats["deleted_keys"], stats["evicted_keys"]) == \
        (1, 0, 1, 0)
    assert client.delete_keys(()) == []


@pytest.fixture
def evicting(server_binary):
    s = Server(server_binary, "--eviction", "lru", "--read-lease-ms", "60000")
    yield s
    s.stop()


def test_stats_count_evictions_and_a_deleted_key_draining_under_its_lease(evicting):
    client = Client(evicting.url)
    client.ensure_initialized(1, 2)
    save(client, 1, "old")
    save(client, 1, "read")
    assert client.batch_exists(["read"]) == [True]  # leased for a minute
    assert client.allocate(1, ["new"]) == [0]  # the pool is full: "old" is evicted, "read" is leased
    assert client.batch_exists(["old"]) == [False]
    assert client.delete_keys(["read"]) == [True]  # gone from lookups, its page drains under the lease
    assert client.get_locations(1, ["read"]) == [None]
    stats = client.stats()
    assert stats["ranks"] == {1: dict(num_pages=2, free=0, allocated=1, mapped=0, orphaned=0, draining=1,
                                      kept_on_release=0)}
    assert {name: stats[name] for name in STATE_FIGURES} == dict(
        keys_complete=0, keys_incomplete=0, keys_leased=1, key_records=2, evicted_keys=1, deleted_keys=1,
        reclaimed_keys=0, reclaimed_allocated_pages=0, reclaimed_orphaned_pages=0)
    # The same figures as the server's own GET /stats.
    status, _, body = evicting.request("GET", "/stats")
    assert status == 200
    wire = json.loads(body)
    assert {r.pop("rank"): r for r in wire.pop("ranks")} == stats.pop("ranks")
    assert wire == stats


def test_delete_keys_refuses_bad_keys_before_sending(closed_port_url):
    client = Client(closed_port_url)
    with pytest.raises(InvalidArgumentError) as caught:
        client.delete_keys(["k", ""])
    assert (caught.value.code, caught.value.operation, caught.value.sent) == ("invalid_argument", "delete_keys", False)
    assert caught.value.detail == "keys[1]: empty key"
    with pytest.raises(TypeError, match="keys: expected a list or tuple of str, got str"):
        client.delete_keys("abc")
    with pytest.raises(TypeError, match=r"keys\[0\]: expected a str, got int"):
        client.delete_keys([7])


def test_stats_failure_is_a_metadata_error(closed_port_url):
    with pytest.raises(MetadataError) as caught:
        Client(closed_port_url, attempts=1, deadline=0.5).stats()
    assert (caught.value.code, caught.value.operation, caught.value.sent) == ("connection_failed", "stats", False)
