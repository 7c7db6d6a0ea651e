"""The Pythonic Client against a real server, and LocalClient in process: the same calls."""

import pytest

from hf3fs_meta import Client, LocalClient, MetadataError


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
