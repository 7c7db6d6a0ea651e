"""bench/trace's offline parts on hand-made traces whose answers are known: the prefix rule's hit count,
Belady's eviction (against an exhaustive search of every keep-or-drop choice on small traces), the
models of vLLM's server and of --eviction lru, and the other policies it compares. No server, well under a second."""
import importlib.machinery
import importlib.util
import itertools
import os
import random
import unittest

PATH = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "trace")
loader = importlib.machinery.SourceFileLoader("bench_trace", PATH)
spec = importlib.util.spec_from_loader("bench_trace", loader)
trace = importlib.util.module_from_spec(spec)
loader.exec_module(trace)


def optimal_hits(traces, pool):
    """The most leading hits any policy gets: after each request, every subset of at most `pool` of the
    cached blocks and the request's own may be kept."""
    states = {frozenset(): 0}  # kept set -> most hits so far
    for blocks in traces:
        following = {}
        for kept, hits in states.items():
            hits += trace.leading_hits(blocks, kept)
            candidates = sorted(kept | set(blocks))
            for size in range(min(pool, len(candidates)) + 1):
                for choice in itertools.combinations(candidates, size):
                    key = frozenset(choice)
                    if following.get(key, -1) < hits:
                        following[key] = hits
        states = following
    return max(states.values())


def random_prefix_trace(rng, nodes, requests):
    """Requests that are paths from a root of a random tree of block ids: a prefix tree, as Mooncake's."""
    parent = {0: None}
    for node in range(1, nodes):
        parent[node] = rng.randrange(node) if rng.random() < 0.8 else None
    result = []
    for _ in range(requests):
        node, path = rng.randrange(nodes), []
        while node is not None:
            path.append(node)
            node = parent[node]
        result.append(path[::-1])
    return result


class LeadingHits(unittest.TestCase):
    def test_counts_only_the_cached_blocks_before_the_first_miss(self):
        self.assertEqual(trace.leading_hits([1, 2, 3], {1, 3}), 1)
        self.assertEqual(trace.leading_hits([1, 2, 3], {2, 3}), 0)
        self.assertEqual(trace.leading_hits([1, 2, 3], {1, 2, 3, 4}), 3)
        self.assertEqual(trace.leading_hits([], {1}), 0)

    def test_prefix_tree(self):
        self.assertTrue(trace.is_prefix_tree([[1, 2], [1, 3], [1, 2, 4]]))
        self.assertFalse(trace.is_prefix_tree([[1, 2], [3, 2]]))
        self.assertFalse(trace.is_prefix_tree([[1], [3, 1]]))

    def test_next_uses(self):
        self.assertEqual(trace.next_uses([[1, 2], [3], [1], [2]]),
                         [[2, 3], [trace.INFINITY], [trace.INFINITY], [trace.INFINITY]])


class Belady(unittest.TestCase):
    def test_keeps_what_comes_back_soonest(self):
        # a b c a b on two pages: c, never used again, is not kept; a and b hit.
        self.assertEqual(trace.belady_hits([[1], [2], [3], [1], [2]], 2), 2)

    def test_keeps_the_start_of_a_prompt_on_a_tie(self):
        # Blocks 1, 2, 3 all come back in the same request: keeping 1 and 2 gives two hits, while
        # keeping 2 and 3 (the wrong tie) would give none under the prefix rule.
        self.assertEqual(trace.belady_hits([[1, 2, 3], [1, 2, 3]], 2), 2)

    def test_a_cache_that_never_forgets(self):
        self.assertEqual(trace.infinite_hits([[1, 2, 3], [1, 2, 4], [1, 5], [6]]), 3)

    def test_matches_an_exhaustive_search_on_prefix_trees(self):
        rng = random.Random(7)
        for case in range(60):
            traces = random_prefix_trace(rng, rng.randrange(3, 8), rng.randrange(3, 8))
            pool = rng.randrange(1, 4)
            with self.subTest(case=case, traces=traces, pool=pool):
                self.assertEqual(trace.belady_hits(traces, pool), optimal_hits(traces, pool))


class Models(unittest.TestCase):
    def test_vllm_refuses_a_batch_larger_than_the_free_pages(self):
        # Three pages: [3, 4] finds one free page and gets none; [5] then takes it; 1 and 2 stay.
        hits, refused, evicted = trace.model_hits([[1, 2], [3, 4], [5], [1, 2], [5]], 3, False)
        self.assertEqual((hits, refused, evicted), (3, 2, 0))

    def test_lru_evicts_the_least_recently_used(self):
        # a b c a b on two pages: c evicts a, a evicts b, b evicts c: no hit.
        self.assertEqual(trace.model_hits([[1], [2], [3], [1], [2]], 2, True), (0, 0, 3))
        # With a use of 1 after 2's save, 2 is the victim and 1 hits.
        self.assertEqual(trace.model_hits([[1], [2], [1], [3], [1]], 2, True), (2, 0, 1))

    def test_lru_counts_reused_keys_in_the_pages_it_frees(self):
        # Three pages hold 1, 2, 3 (1 the least recently used); [4] evicts 1. Then [1, 2, 3]: exists
        # finds 2 and 3 but no leading hit; its allocate reuses them, and, needing three free pages
        # (reused keys count), evicts all it may (4), still one short: 1 is refused.
        self.assertEqual(trace.model_hits([[1, 2, 3], [4], [1, 2, 3]], 3, True), (0, 1, 2))
        self.assertEqual(trace.model_hits([[1, 2, 3], [4], [1, 2, 3]], 3, False), (3, 1, 0))
        self.assertEqual(trace.belady_hits([[1, 2, 3], [4], [1, 2, 3]], 3), 3)


class OtherPolicies(unittest.TestCase):
    def test_prefix_aware_lru_keeps_the_start_of_a_prompt(self):
        # Two pages, [1, 2, 3] twice: used first to last, 2 and 3 stay (no leading hit); last to first,
        # 1 and 2 stay (two).
        self.assertEqual(trace.lru_hits([[1, 2, 3], [1, 2, 3]], 2), 0)
        self.assertEqual(trace.lru_hits([[1, 2, 3], [1, 2, 3]], 2, tail_first=True), 2)
        self.assertEqual(trace.lru_hits([[1], [2], [1], [3], [1]], 2), 2)

    def test_lfu_keeps_the_block_used_most(self):
        # One page: 1 used twice outlives 2 and 3, each used once, and hits again; LRU loses it.
        self.assertEqual(trace.lfu_hits([[1], [1], [2], [3], [1]], 1), 2)
        self.assertEqual(trace.lru_hits([[1], [1], [2], [3], [1]], 1), 1)
        # Among equal counts, the least recently used goes: 1, not 3 (whose going would cost a hit).
        self.assertEqual(trace.lfu_hits([[1], [2], [3], [2], [3]], 2), 2)


if __name__ == "__main__":
    unittest.main()
