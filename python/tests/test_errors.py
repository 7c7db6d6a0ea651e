"""Every error code of the SDK reaches Python as MetadataError with its fields; bad arguments are
refused with TypeError / ValueError before anything is sent."""

import json

import pytest

from hf3fs_meta import Client, Hf3fsGlobalMetadataClient, InvalidArgumentError, MetadataError


def fields(e: MetadataError) -> dict:
    return {name: getattr(e, name) for name in ("code", "operation", "status", "detail", "cause", "rank", "sent",
                                                "attempts", "reinitialized")}


def raised(call) -> MetadataError:
    with pytest.raises(MetadataError) as caught:
        call()
    e = caught.value
    assert isinstance(e, RuntimeError)
    assert str(e)  # the SDK's message
    return e


# Faults the server answers with, and what each becomes: the status and detail as sent, the code,
# the cause and the rank parsed from it. Each is met by a drop-in call that is not repeated.
FAULT_CASES = [
    ("allocate", {"status": 400, "detail": "Invalid request format: need 'rank' and 'keys'"},
     dict(code="invalid_request", status=400, detail="Invalid request format: need 'rank' and 'keys'")),
    ("allocate", {"status": 500, "detail": "Allocation failed: out of memory"},
     dict(code="allocation_failed", status=500, cause="out of memory", rank=None)),
    ("confirm", {"status": 500, "detail": "Confirmation failed: 'int' object is not iterable"},
     dict(code="confirmation_failed", status=500, cause="'int' object is not iterable")),
    ("exists", {"status": 500, "detail": "Key existence check failed: unhashable type: 'list'"},
     dict(code="existence_check_failed", status=500, cause="unhashable type: 'list'")),
    ("locations", {"status": 500, "detail": "Failed to get key locations: boom"},
     dict(code="location_lookup_failed", status=500, cause="boom")),
    ("allocate", {"status": 422, "body": json.dumps({"detail": [{"loc": ["path", "rank"], "msg": "bad",
                                                                  "type": "type_error.integer"}]})},
     dict(code="validation_error", status=422)),
    ("allocate", {"status": 500, "body": "Internal Server Error"}, dict(code="server_error", status=500)),
    ("allocate", {"status": 404, "detail": "Not Found"}, dict(code="unexpected_status", status=404, detail="Not Found")),
    ("allocate", {"status": 502}, dict(code="unavailable", status=502)),
    ("exists", {"status": 200, "body": "{\"exists\":[]}"}, dict(code="protocol_error", status=200)),
]

CALLS = {
    "allocate": lambda c: c.allocate_pages_for_keys(0, [("k", "")]),
    "confirm": lambda c: c.confirm_write_for_keys(0, [("k", 0)], [1]),
    "exists": lambda c: c.batch_key_exists(["k"]),
    "locations": lambda c: c.get_key_locations(0, ["k"]),
}
OPERATIONS = {"allocate": "allocate", "confirm": "confirm_write", "exists": "batch_exists",
              "locations": "get_locations"}


@pytest.mark.parametrize("call,rule,expected", FAULT_CASES, ids=[c[2]["code"] for c in FAULT_CASES])
def test_server_answers_become_metadata_errors(server, call, rule, expected):
    # No retries: a 502, a server_error of a call safe to repeat, would otherwise be repeated.
    client = Hf3fsGlobalMetadataClient(server.url, max_retries=0)
    client.initialize(0, 8)
    server.fault(times=1, **rule)
    e = raised(lambda: CALLS[call](client))
    got = fields(e)
    assert got["operation"] == OPERATIONS[call]
    assert got["sent"] is True
    assert got["attempts"] == 1
    assert got["reinitialized"] is False
    assert e.request_id
    for name, value in expected.items():
        assert got[name] == value, name
    if "detail" in rule:
        assert got["detail"] == rule["detail"]
        assert rule["detail"] in str(e)


def test_rank_not_initialized_names_the_rank(server):
    client = Hf3fsGlobalMetadataClient(server.url)
    e = raised(lambda: client.allocate_pages_for_keys(7, ["k"]))
    assert fields(e) == dict(code="rank_not_initialized", operation="allocate", status=500,
                             detail="Allocation failed: Rank 7 not initialized", cause="Rank 7 not initialized",
                             rank=7, sent=True, attempts=1, reinitialized=False)
    assert "not registered" in e.stop_reason


def test_invalid_initialization(server):
    server_max = 1 << 24
    e = raised(lambda: Hf3fsGlobalMetadataClient(server.url).initialize(0, server_max + 1))
    assert (e.code, e.status, e.operation) == ("invalid_initialization", 400, "initialize")
    assert e.detail.startswith("Invalid initialization parameters")


def test_stale_allocation(server):
    client = Hf3fsGlobalMetadataClient(server.url)
    client.initialize(0, 8)
    e = raised(lambda: client.confirm_write_for_keys(0, [("k", 5)]))  # page 5 was never allocated
    assert (e.code, e.status, e.rank, e.operation) == ("stale_allocation", 409, 0, "confirm_write")


def test_unavailable_after_every_attempt(server):
    server.fault(status=503, times=4)
    e = raised(lambda: Hf3fsGlobalMetadataClient(server.url).batch_key_exists(["k"]))
    assert (e.code, e.status, e.attempts) == ("unavailable", 503, 4)
    assert "exhausted after 4 attempts" in e.stop_reason


def test_connection_failed(closed_port_url):
    # A short deadline: a refused connection may be retried until the deadline, not the attempt count.
    e = raised(lambda: Client(closed_port_url, attempts=1, deadline=0.5).batch_exists(["k"]))
    assert (e.code, e.status, e.sent, e.operation) == ("connection_failed", None, False, "batch_exists")


def test_timeout(server):
    server.fault(path="/keys/batch_exists", delay_ms=2000, times=1)
    e = raised(lambda: Client(server.url, timeout=0.2, attempts=1).batch_exists(["k"]))
    assert (e.code, e.status, e.sent, e.attempts) == ("timeout", None, True, 1)


def test_invalid_argument_is_a_value_error_and_nothing_is_sent(closed_port_url):
    # Nothing listens at the URL: a request would fail with connection_failed instead.
    client = Hf3fsGlobalMetadataClient(closed_port_url)
    cases = [
        (lambda: client.allocate_pages_for_keys(0, ["k", ("k", "")]), "keys[1]: duplicate key 'k' (also keys[0])"),
        (lambda: client.allocate_pages_for_keys(0, [""]), "keys[0]: empty key"),
        (lambda: client.confirm_write_for_keys(0, [("k", -1)]), "confirmations[0]: negative page -1"),
        (lambda: client.confirm_write_for_keys(0, [], [-3]), "pages_to_release[0]: negative page -3"),
        (lambda: client.initialize(0), "num_pages: must be positive for a worker, got 0"),
    ]
    for call, detail in cases:
        with pytest.raises(InvalidArgumentError) as caught:
            call()
        e = caught.value
        assert isinstance(e, ValueError)
        assert (e.code, e.status, e.sent, e.attempts, e.request_id) == ("invalid_argument", None, False, 0, "")
        assert e.detail == detail


@pytest.mark.parametrize("call,error,words", [
    (lambda c: c.allocate_pages_for_keys("0", ["k"]), TypeError, "rank: expected an int, got str"),
    (lambda c: c.allocate_pages_for_keys(True, ["k"]), TypeError, "rank: expected an int, got bool"),
    (lambda c: c.allocate_pages_for_keys(0, "abc"), TypeError, "keys: expected a list or tuple of keys, got str"),
    (lambda c: c.allocate_pages_for_keys(0, ["a", 7]), TypeError, "keys[1]: expected a str or a (key, prefix_key) pair"),
    (lambda c: c.allocate_pages_for_keys(0, [("a",)]), TypeError, "keys[0]: expected a str or a (key, prefix_key) pair"),
    (lambda c: c.allocate_pages_for_keys(0, [("a", None)]), TypeError, "keys[0][1]: expected a str, got NoneType"),
    (lambda c: c.allocate_pages_for_keys(0, [b"k"]), TypeError, "keys[0]: expected a str"),
    (lambda c: c.confirm_write_for_keys(0, [("k", "1")]), TypeError, "key_confirmations[0][1]: expected an int"),
    (lambda c: c.confirm_write_for_keys(0, ["k"]), TypeError, "key_confirmations[0]: expected a (key, page) pair"),
    (lambda c: c.confirm_write_for_keys(0, [], [1.5]), TypeError, "pages_to_release[0]: expected an int, got float"),
    (lambda c: c.confirm_write_for_keys(0, [("k", 1 << 70)]), ValueError, "key_confirmations[0][1]: "),
    (lambda c: c.batch_key_exists([1]), TypeError, "keys[0]: expected a str, got int"),
    (lambda c: c.get_key_locations(0, None), TypeError, "keys: expected a list or tuple of str, got NoneType"),
    (lambda c: c.initialize(0, 8, "boss"), ValueError, "role: expected 'worker' or 'scheduler', got 'boss'"),
    (lambda c: c.initialize(0, 8.0), TypeError, "num_pages: expected an int, got float"),
])
def test_bad_arguments_are_refused_before_sending(closed_port_url, call, error, words):
    with pytest.raises(error) as caught:
        call(Hf3fsGlobalMetadataClient(closed_port_url))
    assert not isinstance(caught.value, MetadataError)
    assert words in str(caught.value)


def test_bad_client_options_are_refused():
    with pytest.raises(ValueError, match="max_retries: must be 0 or more"):
        Hf3fsGlobalMetadataClient("http://127.0.0.1:1", max_retries=-1)
    with pytest.raises(ValueError, match="attempts: must be at least 1"):
        Client("http://127.0.0.1:1", attempts=0)
    with pytest.raises(ValueError, match="timeout: must be a positive number"):
        Client("http://127.0.0.1:1", timeout=0)
    with pytest.raises(ValueError, match="deadline: must be a positive number"):
        Client("http://127.0.0.1:1", deadline=float("nan"))
    with pytest.raises(TypeError):
        Client("http://127.0.0.1:1", 5)  # options are keyword-only
