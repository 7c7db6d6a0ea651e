"""Hf3fsGlobalMetadataClient against raw HTTP: the same calls, made through the drop-in on one server
and as vLLM's client posts them on another, give the same answers."""

import pytest

import hf3fs_meta
from hf3fs_meta import Hf3fsGlobalMetadataClient, MetadataError


def test_every_method_answers_as_the_same_raw_http_calls(server, other_server):
    client = Hf3fsGlobalMetadataClient(server.url)
    raw = other_server

    assert client.initialize(0, 4) is None
    assert raw.post("/rank/0/initialize", {"num_pages": 4}) == (200, {"message": "Rank 0 initialized with 4 pages"})
    assert client.initialize(1, role="scheduler") is None
    assert raw.post("/rank/1/initialize", {"num_pages": 0, "role": "scheduler"})[0] == 200

    keys = [("9e107d9d372bb6826bd81d3542a419d6", ""), ("e4d909c290d0fb1ca068ffaddf22cbd0", "")]
    allocated = client.allocate_pages_for_keys(0, keys)
    status, answer = raw.post("/keys/batch_allocate", {"rank": 0, "keys": [list(k) for k in keys]})
    assert status == 200
    assert allocated == answer["results"] == [[keys[0][0], 0], [keys[1][0], 1]]
    assert all(type(pair) is list for pair in allocated)  # vLLM's shape: lists, as JSON decodes them

    # A plain str is a key with an empty prefix key (vLLM's server would split it into characters).
    assert client.allocate_pages_for_keys(0, ["k3"]) == [["k3", 2]]
    assert raw.post("/keys/batch_allocate", {"rank": 0, "keys": [["k3", ""]]})[1]["results"] == [["k3", 2]]
    # An empty batch, as vLLM's client would send it (it returns [] without sending).
    assert client.allocate_pages_for_keys(0, []) == []

    first = [(keys[0][0], 0)]
    assert client.confirm_write_for_keys(0, first, [1]) is None
    assert raw.post("/keys/confirm_write",
                    {"rank": 0, "confirmations": [list(c) for c in first], "pages_to_release": [1]}) == (204, {})
    assert client.confirm_write_for_keys(0, [["k3", 2]]) is None  # pages_to_release defaults to none
    assert raw.post("/keys/confirm_write", {"rank": 0, "confirmations": [["k3", 2]], "pages_to_release": []})[0] == 204

    probe = [keys[0][0], keys[1][0], "k3", "unknown"]
    exists = client.batch_key_exists(probe)
    assert exists == raw.post("/keys/batch_exists", {"keys": probe})[1]["exists"] == [True, False, True, False]
    locations = client.get_key_locations(0, probe)
    assert locations == raw.post("/keys/get_locations", {"rank": 0, "keys": probe})[1]["locations"] == [0, None, 2, None]

    # The released page comes back at the end of the pool; a full pool answers -1 for every key.
    more = [("a", ""), ("b", "")]
    assert client.allocate_pages_for_keys(0, more) == raw.post(
        "/keys/batch_allocate", {"rank": 0, "keys": [list(k) for k in more]})[1]["results"] == [["a", 3], ["b", 1]]
    assert client.allocate_pages_for_keys(0, [("c", "")]) == [["c", -1]]
    assert raw.post("/keys/batch_allocate", {"rank": 0, "keys": [["c", ""]]})[1]["results"] == [["c", -1]]


def test_a_base_url_with_a_trailing_slash_works_as_with_vllms_client(server):
    client = Hf3fsGlobalMetadataClient(server.url + "/")
    assert client.batch_key_exists(["k"]) == [False]


def test_allocate_hands_back_the_callers_key_objects(server):
    client = Hf3fsGlobalMetadataClient(server.url)
    client.initialize(0, 8)
    key, prefix = "".join(["k", "1"]), "p"
    pairs = client.allocate_pages_for_keys(0, [(key, prefix), ["k2", ""], "k3"])
    assert [p[0] for p in pairs] == ["k1", "k2", "k3"]
    assert pairs[0][0] is key


def test_max_retries_retries_make_max_retries_plus_one_attempts(server):
    for max_retries in (0, 2):
        before = server.requests_answered("/keys/batch_exists", 503)
        server.fault(status=503, times=10)
        client = Hf3fsGlobalMetadataClient(server.url, max_retries=max_retries)
        with pytest.raises(MetadataError) as caught:
            client.batch_key_exists(["k"])
        assert caught.value.code == "unavailable"
        assert caught.value.attempts == max_retries + 1
        assert server.requests_answered("/keys/batch_exists", 503) - before == max_retries + 1
        server.request("DELETE", "/_faults")


def test_a_503_then_success_is_one_call(server):
    client = Hf3fsGlobalMetadataClient(server.url)
    server.fault(status=503, times=2)
    assert client.batch_key_exists(["k"]) == [False]


def test_an_ambiguous_allocate_is_repeated_only_because_the_server_deduplicates(server):
    client = Hf3fsGlobalMetadataClient(server.url)
    client.initialize(0, 8)  # the answer says X-Request-Id-Dedup: the server keeps allocate's answers
    server.fault(path="/keys/batch_allocate", close_connection="after", times=1)
    assert client.allocate_pages_for_keys(0, ["k1"]) == [["k1", 0]]
    # The repeat was answered from the server's cache: no second page was taken.
    assert client.allocate_pages_for_keys(0, ["k2"]) == [["k2", 1]]


def test_the_module_exports_what_it_documents():
    assert set(hf3fs_meta.__all__) == {"Client", "Hf3fsGlobalMetadataClient", "InvalidArgumentError", "LocalClient",
                                       "MetadataError"}
    assert issubclass(hf3fs_meta.MetadataError, RuntimeError)
    assert issubclass(hf3fs_meta.InvalidArgumentError, hf3fs_meta.MetadataError)
    assert issubclass(hf3fs_meta.InvalidArgumentError, ValueError)
