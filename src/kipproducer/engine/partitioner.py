"""librdkafka's partitioners, for the bulk lane.

A key must land on the same partition whichever lane sends it, so the keyed partitioners
reproduce librdkafka's exactly (the tests check against librdkafka itself):

| partitioner | keyed records | NULL key | empty key |
|---|---|---|---|
| consistent | crc32(key) % n | crc32(b"") % n | crc32(b"") % n |
| consistent_random (default) | crc32(key) % n | random | random |
| murmur2 | (murmur2(key) & 0x7fffffff) % n | murmur2(b"") | hashed |
| murmur2_random | as murmur2 | random | hashed |
| fnv1a | abs(int32(fnv1a(key)) % n) | fnv1a(b"") | hashed |
| fnv1a_random | as fnv1a | random | hashed |
| random | random | random | random |

"Random" is sticky per call, like librdkafka's sticky partitioning of keyless records
(``sticky.partitioning.linger.ms``): one produce call's keyless records go to one partition.
"""

from __future__ import annotations

import random as _random

import numpy as np

from .._accumulator import key_hashes, key_lengths

_HASH_OF = {
    "consistent": "crc32", "consistent_random": "crc32",
    "murmur2": "murmur2", "murmur2_random": "murmur2",
    "fnv1a": "fnv1a", "fnv1a_random": "fnv1a",
}
# Which keys are sent to a random partition: "null" (NULL only) or "null_or_empty".
_RANDOM_FOR = {
    "consistent_random": "null_or_empty",
    "murmur2_random": "null",
    "fnv1a_random": "null",
}


def choose_partitions(keys, count: int, num_partitions: int, partitioner: str,
                      rng: _random.Random | None = None) -> np.ndarray:
    """int32 partition of each record; ``keys`` is a column (or None for keyless records)."""
    rng = rng or _random
    sticky = rng.randrange(num_partitions)
    if partitioner == "random" or (keys is None and partitioner in _RANDOM_FOR):
        return np.full(count, sticky, dtype=np.int32)
    if keys is None:
        # consistent / murmur2 / fnv1a hash a NULL key as an empty one: one fixed partition.
        only = choose_partitions([None], 1, num_partitions, partitioner)[0]
        return np.full(count, only, dtype=np.int32)
    algorithm = _HASH_OF[partitioner]
    hashes = key_hashes(keys, algorithm)
    if algorithm == "murmur2":
        hashes &= np.uint32(0x7FFFFFFF)
    if algorithm == "fnv1a":
        # librdkafka (like Sarama, which it follows here) takes the hash as a signed 32-bit
        # int, applies C's truncating %, and drops the sign: abs(int32(h) % n).
        parts = np.abs(np.fmod(hashes.view(np.int32), np.int32(num_partitions)))
        parts = parts.astype(np.int32)
    else:
        parts = (hashes % np.uint32(num_partitions)).astype(np.int32)
    random_for = _RANDOM_FOR.get(partitioner)
    if random_for is not None:
        lengths = key_lengths(keys)
        mask = lengths < 0 if random_for == "null" else lengths <= 0
        parts[mask] = sticky
    return parts
