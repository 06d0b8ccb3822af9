"""Greedy selection in rounds: the step of one document and the step of one
bucket, shared by the CPU (the ``prange`` loops below) and the GPU (the
kernels of :mod:`kernels.cuda`, which call these very functions).

The rule is the sequential one of :mod:`gpu_dedup.stages.select`: in rank
order, a document is removed when it is similar to one of the first
``limit`` kept members before it of one of its buckets, else kept. In
rounds, each bucket keeps a *front* (its first undecided member) and the
kept members before it in rank order (``klist[b_off[b]:][:kcount[b]]``);
those are final. A document is decided in a round when

* it is similar to one of the first ``limit`` entries of those lists: it is
  removed (which kept document it names is settled at the end, when every
  list is final); or
* in each of its buckets the front has reached it, or ``limit`` members
  before the front were kept, and it is similar to none of them: it is kept.

The lowest undecided document always meets one of the two, so every round
decides at least one document; a round decides all those that do.
Missing scores are counted in a round and written by a second, identical
scan into the places the counts give (no atomics: the same on both
targets), and scored before the next round.

Scores are looked up by ``v << 32 | u`` (a document's pairs side by side)
in the sorted windows, where each document's share is known, and in the
small sorted array of the pairs scored since.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

U64 = np.uint64
UNDECIDED, KEPT, REMOVED = 0, 1, 2


@njit(cache=True, inline="always")
def _smaller(a, b):
    """``min(a, b)``: the builtin does not compile for the CUDA target."""
    return a if a < b else b


@njit(cache=True)
def find_sorted(keys, lo, hi, k):
    """Position of ``k`` in the sorted ``keys[lo:hi]``, or -1."""
    end = hi
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] < k:
            lo = mid + 1
        else:
            hi = mid
    if lo < end and keys[lo] == k:
        return lo
    return -1


@njit(cache=True)
def scan_candidates(v, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff, vals, mkeys,
                    mvals, threshold, accept_all, first, out, o):
    """Rank ``v`` against the first ``limit`` kept members before it of each
    of its buckets, as far as they are known.

    Scores are looked up by the pair ``v << 32 | u`` in the windows
    (``keys``, sorted, ``v``'s from ``voff[v]`` to ``voff[v + 1]``) and in
    the pairs scored since (``mkeys``, sorted); ``vals`` and ``mvals`` are
    their scores. The pairs found in neither are written to ``out[o:]``
    when ``o >= 0``.

    Returns ``(missing, best_u, best_s)``: how many scores are missing (a
    pair in two buckets counts twice) and the most similar of the members
    scored similar (ties to the lower rank; -1 and -1.0 for none). With
    ``first``, it stops at the first member scored similar."""
    missing = 0
    best_u = -1
    best_s = -1.0
    lo = voff[v]
    hi = voff[v + 1]
    top = U64(v) << U64(32)
    for e in range(d_off[v], d_off[v + 1]):
        b = d_bkt[e]
        base = b_off[b]
        kc = _smaller(kcount[b], limit)
        for j in range(kc):
            u = klist[base + j]
            if u >= v:
                break
            key = top | U64(u)
            w = find_sorted(keys, lo, hi, key)
            if w >= 0:
                s = vals[w]
            else:
                w = find_sorted(mkeys, 0, mkeys.shape[0], key)
                if w < 0:
                    if o >= 0:
                        out[o + missing] = key
                    missing += 1
                    continue
                s = mvals[w]
            if accept_all or s >= threshold:
                if s > best_s or (s == best_s and u < best_u):
                    best_u = u
                    best_s = s
                    if first:
                        return missing, best_u, best_s
    return missing, best_u, best_s


@njit(cache=True)
def held_back(v, d_off, d_bkt, d_pos, front, kcount, limit):
    """True when a bucket of ``v`` has undecided members before it and fewer
    than ``limit`` kept members before its front: one of them could still
    be kept and compared with ``v``."""
    for e in range(d_off[v], d_off[v + 1]):
        b = d_bkt[e]
        if front[b] < d_pos[e] and kcount[b] < limit:
            return True
    return False


@njit(cache=True)
def decide_one(i, todo, d_off, d_bkt, d_pos, b_off, klist, kcount, front, limit, keys, voff,
               vals, mkeys, mvals, threshold, accept_all, state, nmiss, out):
    """Decide ``todo[i]`` if it can be (see the module docstring); else
    ``nmiss[i]`` gets the number of its missing scores."""
    v = todo[i]
    m, bu, bs = scan_candidates(v, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff, vals,
                                mkeys, mvals, threshold, accept_all, True, out, -1)
    nmiss[i] = 0
    if bu >= 0:
        state[v] = REMOVED
    elif m == 0:
        if not held_back(v, d_off, d_bkt, d_pos, front, kcount, limit):
            state[v] = KEPT
    else:
        nmiss[i] = m


@njit(cache=True)
def best_one(i, docs, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff, vals, mkeys, mvals,
             threshold, accept_all, nmiss, dup, sim, out):
    """The kept document the removed ``docs[i]`` names, once every kept list
    is final; else ``nmiss[i]`` gets the number of its missing scores."""
    v = docs[i]
    m, bu, bs = scan_candidates(v, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff, vals,
                                mkeys, mvals, threshold, accept_all, False, out, -1)
    nmiss[i] = m
    if m == 0:
        dup[v] = bu
        sim[v] = bs


@njit(cache=True)
def missing_one(i, todo, moff, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff, vals,
                mkeys, mvals, threshold, accept_all, out):
    """Write the missing pairs of ``todo[i]`` to ``out[moff[i]:moff[i + 1]]``
    (a scan that stops at nothing: the count of :func:`decide_one` when it
    found no similar member, and of :func:`best_one`)."""
    if moff[i + 1] > moff[i]:
        scan_candidates(todo[i], d_off, d_bkt, b_off, klist, kcount, limit, keys, voff, vals,
                        mkeys, mvals, threshold, accept_all, False, out, moff[i])


@njit(cache=True)
def advance_one(i, bkts, b_off, members, state, klist, kcount, front):
    """Move the front of bucket ``bkts[i]`` past its decided members,
    listing the kept ones."""
    b = bkts[i]
    base = b_off[b]
    size = b_off[b + 1] - base
    f = front[b]
    kc = kcount[b]
    while f < size:
        u = members[base + f]
        st = state[u]
        if st == UNDECIDED:
            break
        if st == KEPT:
            klist[base + kc] = u
            kc += 1
        f += 1
    front[b] = f
    kcount[b] = kc


@njit(cache=True)
def window_one(e, ent_v, d_bkt, d_pos, b_off, members, width, woff, out):
    """The window pairs of entry ``e`` (rank ``ent_v[e]`` in bucket
    ``d_bkt[e]`` at place ``d_pos[e]``): the first ``min(place, width)``
    members ``u``, as ``v << 32 | u`` with the rank ``v``, to ``out[woff[e]:]``."""
    v = ent_v[e]
    b0 = b_off[d_bkt[e]]
    o = woff[e]
    for j in range(_smaller(d_pos[e], width)):
        out[o + j] = (U64(v) << U64(32)) | U64(members[b0 + j])


@njit(cache=True)
def is_candidate(u, v, d_off, d_bkt, b_off, klist, kcount, limit):
    """True when ``u`` is one of the first ``limit`` kept members of a bucket
    of ``v`` (final lists), before ``v``: a pair the rule compares."""
    for e in range(d_off[v], d_off[v + 1]):
        b = d_bkt[e]
        base = b_off[b]
        for j in range(_smaller(kcount[b], limit)):
            w = klist[base + j]
            if w == u:
                return u < v
            if w > u:
                break
    return False


# -- CPU drivers ---------------------------------------------------------------

@njit(parallel=True, cache=True)
def decide_round(todo, d_off, d_bkt, d_pos, b_off, klist, kcount, front, limit, keys, voff, vals,
                 mkeys, mvals, threshold, accept_all, state, nmiss):
    out = np.zeros(0, np.uint64)
    for i in prange(todo.shape[0]):
        decide_one(i, todo, d_off, d_bkt, d_pos, b_off, klist, kcount, front, limit, keys, voff,
                   vals, mkeys, mvals, threshold, accept_all, state, nmiss, out)


@njit(parallel=True, cache=True)
def best_round(docs, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff, vals, mkeys, mvals,
               threshold, accept_all, nmiss, dup, sim):
    out = np.zeros(0, np.uint64)
    for i in prange(docs.shape[0]):
        best_one(i, docs, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff, vals, mkeys,
                 mvals, threshold, accept_all, nmiss, dup, sim, out)


@njit(parallel=True, cache=True)
def missing_round(todo, moff, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff, vals,
                  mkeys, mvals, threshold, accept_all, out):
    for i in prange(todo.shape[0]):
        missing_one(i, todo, moff, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff, vals,
                    mkeys, mvals, threshold, accept_all, out)


@njit(parallel=True, cache=True)
def advance_round(bkts, b_off, members, state, klist, kcount, front):
    for i in prange(bkts.shape[0]):
        advance_one(i, bkts, b_off, members, state, klist, kcount, front)


@njit(parallel=True, cache=True)
def window_round(ent_v, d_bkt, d_pos, b_off, members, width, woff, out):
    for e in prange(ent_v.shape[0]):
        window_one(e, ent_v, d_bkt, d_pos, b_off, members, width, woff, out)


@njit(parallel=True, cache=True)
def candidate_mask(u, v, d_off, d_bkt, b_off, klist, kcount, limit):
    out = np.zeros(u.shape[0], np.bool_)
    for i in prange(u.shape[0]):
        out[i] = is_candidate(u[i], v[i], d_off, d_bkt, b_off, klist, kcount, limit)
    return out
