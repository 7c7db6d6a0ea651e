#!/usr/bin/env python3
"""The flow of vLLM's HF3FS connector (save and load tasks) on hf3fs_meta's drop-in client.

The switch is one line where vLLM builds its client:

    -from vllm.distributed.kv_transfer.kv_connector.v1.hf3fs.hf3fs_metadata_server import (
    -    Hf3fsGlobalMetadataClient)
    +from hf3fs_meta import Hf3fsGlobalMetadataClient

Same constructor, methods and return shapes; in return, a worker carries on when the metadata server
restarts, an allocate is never applied twice, and failures say why (MetadataError: .code, .detail...).

Run it against a server (scripts/with_server starts one and sets HF3FS_META_URL):
    PYTHONPATH=build/release/python /usr/bin/python3 examples/python/vllm_worker.py
It exits non-zero when what it sees is not what it expects.
"""

import hashlib
import json
import os
import sys
import urllib.request

from hf3fs_meta import Hf3fsGlobalMetadataClient, MetadataError

RANK = 0
NUM_PAGES = 1024


def block_keys(tokens, block_size=4):
    """vLLM's keys: the md5 hex of each block's token prefix."""
    return [hashlib.md5(repr(tokens[: i + block_size]).encode()).hexdigest()
            for i in range(0, len(tokens) - block_size + 1, block_size)]


class Storage:
    """Stands in for the 3FS file: one KV block per page."""

    def __init__(self):
        self.pages = {}

    def write(self, page, data):
        self.pages[page] = data
        return True

    def read(self, page):
        return self.pages[page]


def save_task(client, storage, keys, blocks):
    """Allocate a page per block, write the blocks, confirm what was written, release the rest."""
    allocated = client.allocate_pages_for_keys(RANK, [(key, "") for key in keys])
    written, failed = [], []
    for (key, page), block in zip(allocated, blocks):
        if page < 0:
            continue  # no free page: this block is not cached
        (written if storage.write(page, block) else failed).append((key, page))
    client.confirm_write_for_keys(RANK, written, [page for _, page in failed])
    return len(written)


def load_task(client, storage, keys):
    """The scheduler asks which blocks exist; the worker finds their pages and reads them."""
    hits = client.batch_key_exists(keys)
    found = [key for key, hit in zip(keys, hits) if hit]
    pages = client.get_key_locations(RANK, found)
    return [storage.read(page) for page in pages if page is not None]


def forget_state(url):
    """Ask a server run with --enable-fault-injection to forget everything, as a restart does."""
    request = urllib.request.Request(url + "/_faults", data=json.dumps({"forget_state": True}).encode(),
                                     method="POST")
    urllib.request.urlopen(request, timeout=5).close()


def check(condition, what):
    if not condition:
        print("unexpected:", what, file=sys.stderr)
        sys.exit(1)


def main():
    url = os.environ.get("HF3FS_META_URL", "http://127.0.0.1:18000")
    client = Hf3fsGlobalMetadataClient(url)  # as vLLM builds it: base_url, max_retries=3
    storage = Storage()
    client.initialize(RANK, NUM_PAGES)  # registers the rank: the client restores it after a restart

    tokens = list(range(32))
    keys = block_keys(tokens)
    blocks = [f"kv-{i}".encode() for i in range(len(keys))]
    saved = save_task(client, storage, keys, blocks)
    loaded = load_task(client, storage, keys)
    print(f"saved {saved} blocks, loaded {len(loaded)}")
    check(saved == len(keys) and loaded == blocks, "every block saved and loaded back")

    # The metadata server restarts and forgets every rank. vLLM's client would fail every call from
    # here on ("Rank 0 not initialized"); this one initializes rank 0 again and goes on.
    forget_state(url)
    check(client.batch_key_exists(keys) == [False] * len(keys), "the index is gone with the old state")
    saved = save_task(client, storage, keys, blocks)
    check(saved == len(keys) and load_task(client, storage, keys) == blocks, "saved and loaded after the restart")
    print(f"after the server forgot its state: saved {saved} blocks again, loaded them back")

    # A failure says why, and what to do.
    try:
        client.allocate_pages_for_keys(RANK + 1, [keys[0]])  # a rank nobody initialized
        check(False, "an allocate on an uninitialized rank failed")
    except MetadataError as e:
        print(f"error: {e.code} (status {e.status}, rank {e.rank}): {e}")
        check(e.code == "rank_not_initialized" and e.rank == RANK + 1, "the error names the code and the rank")
    return 0


if __name__ == "__main__":
    sys.exit(main())
