"""vLLM's own metadata client, as its HF3FS connector builds it, and a worker's traffic on it.

Unmodified vLLM talks to hf3fs-meta-proxy with this client: a requests.Session mounted with urllib3's
Retry(total=3, backoff_factor=0.3, status_forcelist=[500, 502, 503, 504], allowed_methods=["GET",
"POST"]), no timeout, no token, no request id, raise_for_status on every answer. The proxy's tests
(tests/proxy) and scripts/demo drive the proxy with it, so that what they show is what vLLM would see.
"""

import hashlib
import threading
import time

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry


class VllmLikeClient:
    """vLLM's Hf3fsGlobalMetadataClient, as its connector builds it (no timeout, no token, no id)."""

    def __init__(self, url):
        self.url = url
        self.session = requests.Session()
        retry = Retry(total=3, backoff_factor=0.3, status_forcelist=[500, 502, 503, 504],
                      allowed_methods=["GET", "POST"])
        self.session.mount("http://", HTTPAdapter(max_retries=retry))

    def _post(self, endpoint, body):
        response = self.session.post(f"{self.url}/{endpoint}", json=body)
        response.raise_for_status()
        return response

    def initialize(self, rank, num_pages):
        self._post(f"rank/{rank}/initialize", {"num_pages": num_pages})

    def allocate_pages_for_keys(self, rank, keys):
        return self._post("keys/batch_allocate", {"rank": rank, "keys": keys}).json()["results"]

    def confirm_write_for_keys(self, rank, confirmations, pages_to_release):
        self._post("keys/confirm_write",
                   {"rank": rank, "confirmations": confirmations, "pages_to_release": pages_to_release})

    def batch_key_exists(self, keys):
        return self._post("keys/batch_exists", {"keys": keys}).json()["exists"]

    def get_key_locations(self, rank, keys):
        return self._post("keys/get_locations", {"rank": rank, "keys": keys}).json()["locations"]


def save(client, rank, key):
    """One block saved as vLLM's worker saves it; returns its page (None: no page free)."""
    [[_, page]] = client.allocate_pages_for_keys(rank, [[key, ""]])
    if page < 0:
        return None
    client.confirm_write_for_keys(rank, [[key, page]], [])
    return page


class SaveLoadWorker(threading.Thread):
    """A vLLM worker's traffic on one rank through one URL, until stop(): save a new block (allocate,
    confirm), then load one saved before (batch_exists, get_locations) and check it is where it was
    saved. Keeps every acknowledged save (key -> page), the counts, the longest save or load, and the
    first exception, which ends the loop: vLLM would have seen it."""

    def __init__(self, name, url, rank=0, num_pages=1 << 20):
        super().__init__(name=name, daemon=True)
        self.client = VllmLikeClient(url)
        self.rank, self.num_pages = rank, num_pages
        self.saved = {}  # key -> page, every save acknowledged to the worker
        self.keys = []   # the same keys, in order, to pick loads from
        self.saves = self.loads = 0
        self.longest = 0.0  # seconds, the longest save or load (a failover shows here)
        self.error = None
        self._stop_event = threading.Event()

    def stop(self):
        self._stop_event.set()

    def key(self, i):
        # vLLM names a block by the md5 hex of its tokens; this worker's name keeps workers apart.
        return hashlib.md5(f"{self.name}/{i}".encode()).hexdigest()

    def run(self):
        try:
            self.client.initialize(self.rank, self.num_pages)
            i = 0
            while not self._stop_event.is_set():
                key = self.key(i)
                began = time.monotonic()
                page = save(self.client, self.rank, key)
                if page is None:
                    raise RuntimeError(f"rank {self.rank} has no page free after {len(self.saved)} saves")
                self.saved[key] = page
                self.keys.append(key)
                self.saves += 1
                self._timed(began)
                self._load(self.keys[(i * 7919) % len(self.keys)])  # an older block, spread over all
                i += 1
        except Exception as e:  # the point: vLLM would see this
            self.error = e

    def _load(self, key):
        began = time.monotonic()
        if self.client.batch_key_exists([key]) != [True]:
            raise AssertionError(f"{key}, saved at page {self.saved[key]}, does not exist")
        located = self.client.get_key_locations(self.rank, [key])
        if located != [self.saved[key]]:
            raise AssertionError(f"{key}, saved at page {self.saved[key]}, is located at {located}")
        self.loads += 1
        self._timed(began)

    def _timed(self, began):
        self.longest = max(self.longest, time.monotonic() - began)

    def lost(self):
        """The acknowledged saves that are not found at their page now: (key, page, found) each."""
        keys = list(self.saved)
        lost = []
        for start in range(0, len(keys), 500):
            chunk = keys[start:start + 500]
            exists = self.client.batch_key_exists(chunk)
            located = self.client.get_key_locations(self.rank, chunk)
            lost += [(k, self.saved[k], p) for k, e, p in zip(chunk, exists, located) if not e or p != self.saved[k]]
        return lost
