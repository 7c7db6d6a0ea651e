"""A registered worker rank survives a server kill and restart."""

import pytest

from hf3fs_meta import Hf3fsGlobalMetadataClient, MetadataError


def test_a_worker_rank_survives_server_restarts(server):
    client = Hf3fsGlobalMetadataClient(server.url)
    client.initialize(3, 64)
    [[_, page]] = client.allocate_pages_for_keys(3, ["k1"])
    client.confirm_write_for_keys(3, [("k1", page)])
    assert client.get_key_locations(3, ["k1"]) == [page]

    # allocate goes on: the client initializes rank 3 again and repeats the call.
    server.restart()
    assert client.allocate_pages_for_keys(3, ["k2"]) == [["k2", 0]]
    client.confirm_write_for_keys(3, [("k2", 0)])
    assert client.batch_key_exists(["k1", "k2"]) == [False, True]  # k1 went with the old server

    # get_locations goes on too.
    server.restart()
    assert client.get_key_locations(3, ["k2"]) == [None]
    assert client.allocate_pages_for_keys(3, ["k3"]) == [["k3", 0]]

    # A page allocated before the restart belongs to the lost state: its confirm reports
    # rank_not_initialized with reinitialized true (allocate again), and nothing is applied.
    server.restart()
    with pytest.raises(MetadataError) as caught:
        client.confirm_write_for_keys(3, [("k3", 0)])
    e = caught.value
    assert (e.code, e.rank, e.reinitialized) == ("rank_not_initialized", 3, True)
    assert "allocate again" in e.stop_reason
    assert client.batch_key_exists(["k3"]) == [False]
    assert client.allocate_pages_for_keys(3, ["k3"]) == [["k3", 0]]  # the rank is there again


def test_a_scheduler_initialize_neither_registers_nor_changes_a_registration(server):
    client = Hf3fsGlobalMetadataClient(server.url)
    client.initialize(5, role="scheduler")
    client.initialize(3, 64)
    client.initialize(3, role="scheduler")
    server.restart()
    with pytest.raises(MetadataError) as caught:
        client.allocate_pages_for_keys(5, ["k"])
    assert (caught.value.code, caught.value.reinitialized) == ("rank_not_initialized", False)
    # Rank 3 is still registered as a worker of 64 pages.
    assert client.allocate_pages_for_keys(3, ["k"]) == [["k", 0]]
    status, answer = server.post("/keys/batch_allocate", {"rank": 3, "keys": [[f"x{i}", ""] for i in range(64)]})
    assert status == 200
    assert [page for _, page in answer["results"]] == [-1] * 64  # 63 left: the pool has 64 pages


def test_a_rank_not_registered_is_not_restored(server):
    client = Hf3fsGlobalMetadataClient(server.url)
    server.post("/rank/3/initialize", {"num_pages": 8})  # initialized by someone else
    assert client.allocate_pages_for_keys(3, ["k"]) == [["k", 0]]
    server.restart()
    with pytest.raises(MetadataError) as caught:
        client.get_key_locations(3, ["k"])
    assert (caught.value.code, caught.value.reinitialized) == ("rank_not_initialized", False)
