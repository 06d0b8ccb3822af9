"""Connected components on the device: label propagation as array code
over NumPy or CuPy, and cuGraph's weakly connected components where it
imports (imported inside the function only).
"""
from __future__ import annotations

import numpy as np

from .arrays import unique


def _scatter_min(xp, target, idx, values) -> None:
    if xp is np:
        np.minimum.at(target, idx, values)
    else:
        import cupyx
        cupyx.scatter_min(target, idx, values)

def components_propagation(xp, n: int, ea, eb):
    """Connected-component labels of ``n`` nodes and the edges ``ea``-``eb``
    in the array module ``xp``: every node ends with the smallest node of its
    component, by rounds of minimum-label hooking over the edges and pointer
    jumping (no edge list leaves the device)."""
    labels = xp.arange(n, dtype=xp.int64)
    if int(ea.shape[0]) == 0:
        return labels
    ea = xp.asarray(ea, dtype=xp.int64)
    eb = xp.asarray(eb, dtype=xp.int64)
    while True:
        la, lb = labels[ea], labels[eb]
        m = xp.minimum(la, lb)
        new = labels.copy()
        _scatter_min(xp, new, la, m)          # hook the roots, then every node
        _scatter_min(xp, new, lb, m)
        _scatter_min(xp, new, ea, m)
        _scatter_min(xp, new, eb, m)
        while True:                           # pointer jumping to the roots
            nxt = new[new]
            if bool((nxt == new).all()):
                break
            new = nxt
        if bool((new == labels).all()):
            return labels
        labels = new

def cugraph_components(n: int, ea, eb):
    import cudf
    import cugraph
    import cupy
    df = cudf.DataFrame({"src": cupy.asarray(ea), "dst": cupy.asarray(eb)})
    g = cugraph.Graph(directed=False)
    g.from_cudf_edgelist(df, source="src", destination="dst")
    cc = cugraph.weakly_connected_components(g)
    vertex = cc["vertex"].to_numpy().astype(np.int64)
    label = cc["labels"].to_numpy().astype(np.int64)
    labels = np.arange(n, dtype=np.int64)
    labels[vertex] = n + label
    return unique(labels, return_inverse=True)[1].reshape(-1).astype(np.int64)
