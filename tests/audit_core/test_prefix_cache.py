"""PrefixCache's bookkeeping: which prompts it keeps, for how long, and within what memory (no model needed)."""
from __future__ import annotations

import torch
from transformers import DynamicCache

from audit_core.scoring import PrefixCache, _cache_bytes


def _states(ids: list[int], layers: int = 2) -> DynamicCache:
    """A stand-in key/value cache: one position per token id, the id as its value (so a copy can be checked)."""
    past = DynamicCache()
    for layer in range(layers):
        t = torch.tensor(ids, dtype=torch.float32).reshape(1, 1, len(ids), 1).repeat(1, 1, 1, 4)
        past.update(t.clone(), t.clone(), layer)
    return past


def test_a_hit_keeps_an_entry_that_first_in_first_out_would_have_evicted():
    cache = PrefixCache(max_entries=3)
    a, b, c, d = [1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12]
    for ids in (a, b, c):
        cache.store(ids, _states(ids))
    n, past = cache.lookup(a + [99])  # a is used again: now the most recent
    assert n == 3 and past.layers[0].keys[0, 0, :, 0].tolist() == [1, 2, 3]
    cache.store(d, _states(d))  # over the limit: b, the least recently used, goes
    assert cache.lookup(b + [99]) == (0, None)
    assert cache.lookup(a + [99])[0] == 3 and cache.lookup(c + [99])[0] == 3


def test_returned_states_are_copies():
    cache = PrefixCache()
    cache.store([1, 2, 3], _states([1, 2, 3]))
    _, past = cache.lookup([1, 2, 3, 4])
    past.layers[0].keys.mul_(0)
    _, again = cache.lookup([1, 2, 3, 4])
    assert again.layers[0].keys[0, 0, :, 0].tolist() == [1, 2, 3]


def test_a_prompt_already_covered_is_not_stored_twice_and_an_extended_one_replaces_its_prefix():
    cache = PrefixCache(max_entries=8)
    cache.store([1, 2, 3, 4], _states([1, 2, 3, 4]))
    cache.store([1, 2], _states([1, 2]))  # a prefix of the stored prompt: nothing new to keep
    assert len(cache._entries) == 1
    cache.store([1, 2, 3, 4, 5, 6], _states([1, 2, 3, 4, 5, 6]))  # extends it: the longer one stands for both
    assert [key for key, _, _ in cache._entries] == [[1, 2, 3, 4, 5, 6]]
    n, past = cache.lookup([1, 2, 3, 7])
    assert n == 3 and past.get_seq_length() == 6  # the caller crops to the shared part


def test_the_byte_bound_evicts_the_oldest_but_never_the_newest():
    one = _cache_bytes(_states([1, 2, 3, 4]))
    assert one == 2 * 2 * 4 * 4 * 4  # layers x (keys, values) x positions x width x 4 bytes
    cache = PrefixCache(max_entries=100, max_bytes=2 * one)
    for start in (0, 10, 20):
        ids = [start + i for i in range(4)]
        cache.store(ids, _states(ids))
    assert [key[0] for key, _, _ in cache._entries] == [10, 20] and cache.stored_bytes == 2 * one
    big = list(range(100, 140))  # larger than the whole bound alone: kept, as the only entry
    cache.store(big, _states(big))
    assert [key[0] for key, _, _ in cache._entries] == [100]
