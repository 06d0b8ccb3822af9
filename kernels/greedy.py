"""The kernels of greedy selection (``gpu_dedup.stages.select``).

Two ways to the same decisions: the sequential passes of the CPU
(:func:`greedy_pass`, over a table of scores, :func:`table_insert`, and the
windows of :func:`window_pairs`), and the rounds, whose step of one document
and step of one bucket are shared by the CPU (the loops below, on several threads by
:func:`kernels.threads.for_range`) and
the GPU (the kernels of :mod:`kernels.cuda_kernels`, which call these very
functions).

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

from .jit import njit

from .hashing import U64, fmix64
from .primitives import smaller
from .runs import find_sorted
from .sorting import gather_runs, sorted_unique
from .threads import for_range

UNDECIDED, KEPT, REMOVED = 0, 1, 2


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
        kc = smaller(kcount[b], limit)
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
    for j in range(smaller(d_pos[e], width)):
        out[o + j] = (U64(v) << U64(32)) | U64(members[b0 + j])


@njit(cache=True)
def is_candidate(u, v, d_off, d_bkt, b_off, klist, kcount, limit):
    """True when ``u`` is one of the first ``limit`` kept members of a bucket
    of ``v`` (final lists), before ``v``: a pair the rule compares."""
    for e in range(d_off[v], d_off[v + 1]):
        b = d_bkt[e]
        base = b_off[b]
        for j in range(smaller(kcount[b], limit)):
            w = klist[base + j]
            if w == u:
                return u < v
            if w > u:
                break
    return False


# -- CPU drivers ---------------------------------------------------------------

def decide_round(todo, d_off, d_bkt, d_pos, b_off, klist, kcount, front, limit, keys, voff, vals,
                 mkeys, mvals, threshold, accept_all, state, nmiss):
    for_range(_decide_range, todo.shape[0], todo, d_off, d_bkt, d_pos, b_off, klist, kcount,
              front, limit, keys, voff, vals, mkeys, mvals, threshold, accept_all, state, nmiss,
              grain=256)


@njit(cache=True, nogil=True)
def _decide_range(todo, d_off, d_bkt, d_pos, b_off, klist, kcount, front, limit, keys, voff,
                  vals, mkeys, mvals, threshold, accept_all, state, nmiss, i0, i1):
    out = np.zeros(0, np.uint64)
    for i in range(i0, i1):
        decide_one(i, todo, d_off, d_bkt, d_pos, b_off, klist, kcount, front, limit, keys, voff,
                   vals, mkeys, mvals, threshold, accept_all, state, nmiss, out)


def best_round(docs, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff, vals, mkeys, mvals,
               threshold, accept_all, nmiss, dup, sim):
    for_range(_best_range, docs.shape[0], docs, d_off, d_bkt, b_off, klist, kcount, limit, keys,
              voff, vals, mkeys, mvals, threshold, accept_all, nmiss, dup, sim, grain=256)


@njit(cache=True, nogil=True)
def _best_range(docs, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff, vals, mkeys, mvals,
                threshold, accept_all, nmiss, dup, sim, i0, i1):
    out = np.zeros(0, np.uint64)
    for i in range(i0, i1):
        best_one(i, docs, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff, vals, mkeys,
                 mvals, threshold, accept_all, nmiss, dup, sim, out)


def missing_round(todo, moff, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff, vals,
                  mkeys, mvals, threshold, accept_all, out):
    for_range(_missing_range, todo.shape[0], todo, moff, d_off, d_bkt, b_off, klist, kcount,
              limit, keys, voff, vals, mkeys, mvals, threshold, accept_all, out, grain=256)


@njit(cache=True, nogil=True)
def _missing_range(todo, moff, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff, vals,
                   mkeys, mvals, threshold, accept_all, out, i0, i1):
    for i in range(i0, i1):
        missing_one(i, todo, moff, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff, vals,
                    mkeys, mvals, threshold, accept_all, out)


def advance_round(bkts, b_off, members, state, klist, kcount, front):
    for_range(_advance_range, bkts.shape[0], bkts, b_off, members, state, klist, kcount, front,
              grain=256)


@njit(cache=True, nogil=True)
def _advance_range(bkts, b_off, members, state, klist, kcount, front, i0, i1):
    for i in range(i0, i1):
        advance_one(i, bkts, b_off, members, state, klist, kcount, front)


def window_round(ent_v, d_bkt, d_pos, b_off, members, width, woff, out):
    for_range(_window_range, ent_v.shape[0], ent_v, d_bkt, d_pos, b_off, members, width, woff,
              out, grain=1024)


@njit(cache=True, nogil=True)
def _window_range(ent_v, d_bkt, d_pos, b_off, members, width, woff, out, e0, e1):
    for e in range(e0, e1):
        window_one(e, ent_v, d_bkt, d_pos, b_off, members, width, woff, out)


def candidate_mask(u, v, d_off, d_bkt, b_off, klist, kcount, limit):
    out = np.zeros(u.shape[0], np.bool_)
    for_range(_candidate_range, u.shape[0], u, v, d_off, d_bkt, b_off, klist, kcount, limit, out,
              grain=1024)
    return out


@njit(cache=True, nogil=True)
def _candidate_range(u, v, d_off, d_bkt, b_off, klist, kcount, limit, out, i0, i1):
    for i in range(i0, i1):
        out[i] = is_candidate(u[i], v[i], d_off, d_bkt, b_off, klist, kcount, limit)


# -- the sequential passes (CPU) ------------------------------------------------

@njit(cache=True)
def _slot_of(keys, k):
    mask = U64(keys.shape[0] - 1)
    slot = np.int64(fmix64(k) & mask)
    while keys[slot] != k and keys[slot] != 0:
        slot = (slot + 1) & np.int64(keys.shape[0] - 1)
    return slot


@njit(cache=True)
def table_insert(keys, vals, q, v):
    """Insert keys ``q`` with values ``v`` (keys already present keep theirs);
    returns how many were new. The table must have room."""
    new = 0
    for i in range(q.shape[0]):
        slot = _slot_of(keys, q[i])
        if keys[slot] == 0:
            keys[slot] = q[i]
            vals[slot] = v[i]
            new += 1
    return new


def window_pairs(d_off, d_bkt, d_pos, b_off, members, width):
    """For every rank ``v``: the distinct members among the first
    ``min(pos, width)`` of each of its buckets, where ``pos`` is its own
    place there (``d_pos``, aligned with ``d_bkt``): the documents it is
    compared with when nothing before it was removed. Returns the CSR
    ``(off, u)`` over ranks, ``u`` ascending within a rank."""
    n = d_off.shape[0] - 1
    cap = np.zeros(n + 1, np.int64)
    for_range(_window_sizes, n, d_off, d_pos, width, cap, grain=1024)
    np.cumsum(cap, out=cap)
    tmp = np.empty(cap[n], np.int64)
    cnt = np.zeros(n + 1, np.int64)
    for_range(_window_lists, n, d_off, d_bkt, d_pos, b_off, members, width, cap, tmp, cnt,
              grain=1024)
    off = np.cumsum(cnt)
    u = np.empty(off[n], np.int64)
    for_range(gather_runs, n, tmp, cap, off, u, grain=1024)
    return off, u


@njit(cache=True, nogil=True, stand_in="vector_misc.window_sizes")
def _window_sizes(d_off, d_pos, width, cap, v0, v1):
    for v in range(v0, v1):
        c = 0
        for e in range(d_off[v], d_off[v + 1]):
            c += min(d_pos[e], width)
        cap[v + 1] = c


@njit(cache=True, nogil=True, stand_in="vector_misc.window_lists")
def _window_lists(d_off, d_bkt, d_pos, b_off, members, width, cap, tmp, cnt, v0, v1):
    for v in range(v0, v1):
        m = cap[v]
        runs = 0
        for e in range(d_off[v], d_off[v + 1]):
            b0 = b_off[d_bkt[e]]
            w = min(d_pos[e], width)
            runs += w > 0
            for j in range(w):
                tmp[m] = members[b0 + j]
                m += 1
        if runs > 1:
            seg = tmp[cap[v]:m]
            # ranks are never negative: sorted as uint64, their order is the same,
            # and the sort compiled for the shingle sets' uint64 serves both
            cnt[v + 1] = sorted_unique(seg.view(np.uint64), m - cap[v])
        else:       # one bucket's first members: ascending and distinct already
            cnt[v + 1] = m - cap[v]


@njit(cache=True)
def _window_find(p_off, p_u, v, u):
    """Position of ``u`` in rank ``v``'s window list, or -1."""
    return find_sorted(p_u, p_off[v], p_off[v + 1], u)


@njit(cache=True)
def greedy_pass(todo, d_off, d_bkt, b_off, state, klist, kcount, blist, bcount, bstamp,
                stamp, p_off, p_u, p_s, t_keys, t_vals, threshold, accept_all, limit, dup,
                sim, miss, blocked):
    """One pass of the sequential greedy rule over the undecided ranks ``todo``
    (ascending), with the scores known so far: ``p_s`` of each rank's window
    (``p_off``, ``p_u``: :func:`window_pairs`) and the table ``(t_keys,
    t_vals)`` of the others.

    A rank is decided when every bucket of it (``d_bkt[d_off[v]:d_off[v+1]]``)
    is free of ranks blocked in this pass and its score against each of the
    first ``limit`` kept members of each of them is known: removed
    (``state`` 2, ``dup``, ``sim``: the most similar, ties to the lower rank)
    when one of those scores is similar, else kept (``state`` 1, appended to
    the bucket's kept list ``klist[b_off[b]:][:kcount[b]]``). Otherwise it is
    blocked: listed in ``blocked`` and in its buckets' blocked lists
    (``blist``, ``bcount``, valid where ``bstamp == stamp``), and its unknown
    scores against the first ``limit`` kept and the first ``limit`` blocked
    members of each bucket are requested in ``miss`` (packed pairs, distinct,
    none in the table). A blocked rank holds back the buckets that have
    fewer than ``limit`` kept members; a decision is final, since the first
    ``limit`` kept members of its buckets are. When ``miss`` might overflow,
    the rest of ``todo`` is blocked as it is. The kept lists are in rank order
    up to their first ``limit`` entries (the only ones read).

    Returns ``(requested, n_blocked)``.
    """
    most = 1
    for i in range(todo.shape[0]):
        v = todo[i]
        c = d_off[v + 1] - d_off[v]
        if c > most:
            most = c
    part = np.empty(2 * limit * most, np.int64)
    n_miss = 0
    n_blk = 0
    for i in range(todo.shape[0]):
        v = todo[i]
        lo = d_off[v]
        hi = d_off[v + 1]
        if n_miss + 2 * limit * (hi - lo) > miss.shape[0]:
            for j in range(i, todo.shape[0]):
                blocked[n_blk] = todo[j]
                n_blk += 1
            break
        held = False
        m = 0
        for e in range(lo, hi):
            b = d_bkt[e]
            if bstamp[b] == stamp:
                held = True
            for j in range(min(kcount[b], limit)):
                part[m] = klist[b_off[b] + j]
                m += 1
        m = sorted_unique(part.view(np.uint64), m)
        best_u = -1
        best_s = -1.0
        if not held:
            for j in range(m):
                u = part[j]
                w = _window_find(p_off, p_u, v, u)
                if w >= 0:
                    s = p_s[w]
                else:
                    key = (U64(u) << U64(32)) | U64(v)
                    slot = _slot_of(t_keys, key)
                    if t_keys[slot] != key:
                        held = True
                        break
                    s = t_vals[slot]
                if (accept_all or s >= threshold) and s > best_s:
                    best_u = u
                    best_s = s
        if held:
            # ask for the kept and the blocked members before it, then block it
            for e in range(lo, hi):
                b = d_bkt[e]
                if bstamp[b] == stamp:
                    for j in range(min(bcount[b], limit)):
                        part[m] = blist[b_off[b] + j]
                        m += 1
            m = sorted_unique(part.view(np.uint64), m)
            for j in range(m):
                if _window_find(p_off, p_u, v, part[j]) >= 0:
                    continue
                key = (U64(part[j]) << U64(32)) | U64(v)
                if t_keys[_slot_of(t_keys, key)] != key:
                    miss[n_miss] = key
                    n_miss += 1
            # it holds back a bucket only where it could be one of the first
            # `limit` kept (later members are compared with no other)
            for e in range(lo, hi):
                b = d_bkt[e]
                if kcount[b] >= limit:
                    continue
                if bstamp[b] != stamp:
                    bstamp[b] = stamp
                    bcount[b] = 0
                blist[b_off[b] + bcount[b]] = v
                bcount[b] += 1
            blocked[n_blk] = v
            n_blk += 1
            continue
        if best_u >= 0:
            state[v] = 2
            dup[v] = best_u
            sim[v] = best_s
        else:
            state[v] = 1
            for e in range(lo, hi):
                b = d_bkt[e]
                klist[b_off[b] + kcount[b]] = v
                kcount[b] += 1
    return n_miss, n_blk
