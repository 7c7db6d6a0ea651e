"""Types of the binding. Every method raises MetadataError when the call fails, TypeError or
InvalidArgumentError (a ValueError) for arguments refused before anything is sent."""

from typing import Any, Dict, List, Literal, Optional, Sequence, Tuple, Union

Role = Literal["worker", "scheduler"]
# A block key: (key, prefix_key) as vLLM passes them, or a str (an empty prefix key).
BlockKey = Union[str, Tuple[str, str], List[str]]
Confirmation = Union[Tuple[str, int], List[Union[str, int]]]

__version__: str  # the project's version, as CMakeLists.txt's project() names it

class Client:
    """A client of the HF3FS metadata service over HTTP, safe to share between threads.

    url: the server, e.g. "http://127.0.0.1:18000"; or the members of a highly available service,
        as a list of URLs or one str "URL,URL,...": calls go to one member at a time, and a member
        that answers 503 "not the leader" sends them to the leader it names (X-Hf3fs-Leader), else
        to the next URL, as a member that does not answer does. Such a 503 applied nothing, so any
        call is repeated after it, within the deadline. An entry that is not an http:// or https://
        URL raises InvalidArgumentError naming url (and the entry's index), before anything is sent.
    timeout: seconds per attempt (default 5).
    attempts: attempts per call, the first included (default 4); a refused connection (the server
        restarting) is repeated until the deadline whatever the count.
    deadline: seconds for a whole call, retries included (default 10). timeout and deadline above
        3,153,600,000 s (100 years, the longest the client measures) raise ValueError.
    token: the bearer token of a server started with --auth-token-file (default: $HF3FS_META_TOKEN
        if set, else none). Any byte outside visible ASCII (0x21-0x7E: space, CR, LF, control,
        non-ASCII) raises InvalidArgumentError naming token= or $HF3FS_META_TOKEN, before anything
        is sent.
    ca_file: for an https:// url, the PEM file of the CA that signed the server's certificate
        (default: $HF3FS_META_CA_FILE if set, else the system's CAs).
    namespace: the namespace every call acts in (default: $HF3FS_META_NAMESPACE if set, else none:
        the default namespace, which is all a server without namespaces has). Its ranks, pages and
        keys are apart from every other namespace's; sent as the X-Hf3fs-Namespace header. A name is
        1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-'; any other raises InvalidArgumentError
        naming namespace= or $HF3FS_META_NAMESPACE, before anything is sent. A server that answers
        without echoing the header (vLLM's own, which has no namespaces and would serve its shared
        space) fails every call with MetadataError code "protocol_error".
    """

    def __init__(self, url: Union[str, Sequence[str]] = "http://127.0.0.1:18000", *, timeout: Optional[float] = None,
                 attempts: Optional[int] = None, deadline: Optional[float] = None,
                 token: Optional[str] = None, ca_file: Optional[str] = None,
                 namespace: Optional[str] = None) -> None: ...
    def initialize(self, rank: int, num_pages: int, role: Role = "worker") -> str:
        """Initialize a rank; nothing is registered. Returns the server's message."""
    def ensure_initialized(self, rank: int, num_pages: int, role: Role = "worker") -> str:
        """Initialize a rank and, for a worker, register it: when the server later says "not
        initialized", the client initializes it again and repeats allocate / get_locations. A
        scheduler initialize registers nothing and leaves a registration as it is."""
    def register_rank(self, rank: int, num_pages: int, role: Role = "worker") -> None:
        """Register a rank without sending anything: the first initialize goes out when the server
        says "not initialized"."""
    def allocate(self, rank: int, keys: Sequence[BlockKey]) -> List[int]:
        """A page per key, in key order; -1 where no page was free."""
    def confirm_write(self, rank: int, confirmations: Sequence[Confirmation],
                      pages_to_release: Sequence[int] = ()) -> None:
        """Record that each key was written to its page, then release pages. After a server restart
        this raises MetadataError with code "rank_not_initialized" and reinitialized True: the pages
        belong to the lost state; allocate again."""
    def batch_exists(self, keys: Sequence[str]) -> List[bool]:
        """Whether each key is complete (confirmed on every rank)."""
    def get_locations(self, rank: int, keys: Sequence[str]) -> List[Optional[int]]:
        """The rank's page of each complete key, else None."""
    def delete_keys(self, keys: Sequence[str]) -> List[bool]:
        """Remove each key from every lookup at once (an extension of the reference server, POST
        /keys/delete): whether each key existed. A page under a read lease drains back to its pool
        when the lease ends."""
    def stats(self) -> Dict[str, Any]:
        """GET /stats (an extension of the reference server), under its names: "ranks" maps each
        rank to its pages by state ("num_pages", "free", "allocated", "mapped", "orphaned",
        "draining", which add up to num_pages) and "kept_on_release"; beside it "keys_complete",
        "keys_incomplete", "keys_leased", "key_records", and the counters "evicted_keys",
        "deleted_keys", "reclaimed_keys", "reclaimed_allocated_pages", "reclaimed_orphaned_pages"."""
    def clear(self) -> None:
        """Make the server forget every rank and key of this client's namespace (never repeated after
        an ambiguous failure)."""
    def namespaces(self) -> List[Dict[str, Any]]:
        """GET /namespaces (an extension of the reference server): every namespace, the default one
        included, sorted by name, as {"name": str, "ranks": [int, ...], "pages": int, "keys": int}.
        A server with --tenants-file answers it for an operator's token only (else MetadataError,
        status 403)."""
    def drop_namespace(self, name: str) -> Dict[str, Any]:
        """POST /namespaces/{name}/drop (an extension): the namespace, its ranks, pages and keys go
        at once. Returns {"namespace": name, "dropped": bool, "ranks": int, "pages": int,
        "keys_removed": int}; dropped is False for a name that does not exist. A name outside the
        namespace rule raises InvalidArgumentError before anything is sent; "default" is refused by
        the server (clear() empties it). Never repeated after an ambiguous failure. For an operator,
        as namespaces()."""
    def key_status(self, keys: Sequence[str]) -> Dict[str, Any]:
        """POST /keys/status (an extension): why batch_exists says what it says, in this client's
        namespace. Returns {"ranks_initialized": int, "status": [...]}, one entry per key: None for
        an unknown key, else {"ranks": [int, ...] (the ranks that confirmed it), "tp_world_size":
        int (the ranks it needs), "complete": bool}. A read: it takes no lease and changes no
        eviction order."""

class LocalClient(Client):
    """The Client calls in this process over an in-memory state, through the server's own codec: for
    single-node use and tests. No server, no network."""

    def __init__(self) -> None: ...

class Hf3fsGlobalMetadataClient:
    """A drop-in for vLLM's Hf3fsGlobalMetadataClient: same methods, arguments and return shapes.

    Unlike vLLM's: a worker rank it initialized is initialized again when the server restarts (and
    allocate / get_key_locations go on); an allocate is never repeated after an ambiguous failure
    unless the server deduplicates; only failures that can succeed on a repeat are repeated, up to
    max_retries times: exactly max_retries + 1 attempts for every failure, a refused connection
    included, with urllib3's backoff (backoff_factor 0.3: 0, 0.6, 1.2, 2.4 s... between attempts)
    and no retry budget, as vLLM's urllib3 Retry, within 10 s; failures raise MetadataError with the
    server's detail, code and cause. A server started with --auth-token-file gets the bearer token
    in $HF3FS_META_TOKEN (visible ASCII only, else InvalidArgumentError); an https:// base_url is
    checked against the CA file in $HF3FS_META_CA_FILE (else the system's CAs). namespace (default:
    $HF3FS_META_NAMESPACE if set, else none) is as Client's, so an unmodified vLLM is put in a
    namespace by its environment. base_url may name the members of a highly available service as
    "URL,URL,..." (or a list), as Client's url: vLLM's config carries the str as it is.
    """

    def __init__(self, base_url: Union[str, Sequence[str]] = "http://localhost:18000", max_retries: int = 3,
                 namespace: Optional[str] = None) -> None: ...
    def initialize(self, rank: int, num_pages: int = 0, role: Role = "worker") -> None:
        """Initialize the rank. A worker rank is registered, so that it is restored after a server
        restart; a scheduler initialize neither registers nor changes a registration."""
    def allocate_pages_for_keys(self, rank: int, keys: Sequence[BlockKey]) -> List[List[Union[str, int]]]:
        """[[key, page], ...] in key order; page -1 where none was free."""
    def confirm_write_for_keys(self, rank: int, key_confirmations: Sequence[Confirmation],
                               pages_to_release: Optional[Sequence[int]] = None) -> None:
        """Record (key, page) writes, then release pages."""
    def batch_key_exists(self, keys: Sequence[str]) -> List[bool]:
        """Whether each key is complete."""
    def get_key_locations(self, rank: int, keys: Sequence[str]) -> List[Optional[int]]:
        """The rank's page of each complete key, else None."""
