"""NumPy's default generator, for the one draw every run makes, without
importing :mod:`numpy.random`.

The hash functions of a run are ``2 * K`` 64-bit words drawn from
``numpy.random.default_rng(seed)`` (:func:`gpu_dedup.reference.permutations`,
the oracle, draws them with NumPy). Importing :mod:`numpy.random` loads its
every bit generator: 8-15 ms, a twentieth of a small run's start. The same
words come from a plain-Python ``SeedSequence`` (its pool of four 32-bit
words, mixed as NumPy mixes them) and ``PCG64`` (a 128-bit LCG, XSL-RR
output); ``Generator.integers(0, 2**64, dtype=uint64)`` returns the
generator's words unchanged. The tests compare both bit for bit.

>>> import numpy as np
>>> uint64s(42, 3) == np.random.default_rng(42).integers(0, 2**64, 3, np.uint64).tolist()
True
"""
from __future__ import annotations

_M32 = 0xFFFFFFFF
_M64 = (1 << 64) - 1
_M128 = (1 << 128) - 1
# SeedSequence's constants (numpy/random/bit_generator.pyx)
_INIT_A, _MULT_A = 0x43B0D7E5, 0x931E8875
_INIT_B, _MULT_B = 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R = 0xCA01F9DD, 0x4973F715
_POOL = 4
# PCG64's multiplier (PCG_DEFAULT_MULTIPLIER_128)
_PCG_MULT = (2549297995355413924 << 64) | 4865540595714422341


def seed_words(seed: int, n: int) -> list[int]:
    """``SeedSequence(seed).generate_state(n, uint32)``, for a seed ``>= 0``."""
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    entropy = []
    while True:
        entropy.append(seed & _M32)
        seed >>= 32
        if not seed:
            break
    const = _INIT_A

    def hashmix(v: int) -> int:
        nonlocal const
        v ^= const
        const = (const * _MULT_A) & _M32
        v = (v * const) & _M32
        return v ^ (v >> 16)

    def mix(x: int, y: int) -> int:
        r = (_MIX_L * x - _MIX_R * y) & _M32
        return r ^ (r >> 16)

    pool = [hashmix(entropy[i] if i < len(entropy) else 0) for i in range(_POOL)]
    for src in range(_POOL):
        for dst in range(_POOL):
            if src != dst:
                pool[dst] = mix(pool[dst], hashmix(pool[src]))
    for src in range(_POOL, len(entropy)):
        for dst in range(_POOL):
            pool[dst] = mix(pool[dst], hashmix(entropy[src]))
    const = _INIT_B
    out = []
    for i in range(n):
        v = pool[i % _POOL] ^ const
        const = (const * _MULT_B) & _M32
        v = (v * const) & _M32
        out.append(v ^ (v >> 16))
    return out


def uint64s(seed: int, count: int) -> list[int]:
    """The first ``count`` words of ``PCG64(seed)``: what
    ``numpy.random.default_rng(seed).integers(0, 2**64, count, dtype=np.uint64)``
    returns."""
    w = seed_words(seed, 8)
    v = [w[2 * i] | (w[2 * i + 1] << 32) for i in range(4)]     # little-endian pairs
    inc = ((((v[2] << 64) | v[3]) << 1) | 1) & _M128
    state = inc                                     # 0 * mult + inc
    state = (state + ((v[0] << 64) | v[1])) & _M128
    state = (state * _PCG_MULT + inc) & _M128
    out = []
    for _ in range(count):
        state = (state * _PCG_MULT + inc) & _M128
        x = ((state >> 64) ^ state) & _M64
        r = state >> 122
        out.append(((x >> r) | (x << ((64 - r) & 63))) & _M64)
    return out
