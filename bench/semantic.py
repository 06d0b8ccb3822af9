"""Semantic deduplication side by side: gpu_dedup, semhash and WordLlama on
the same embeddings and the same cosine threshold.

    python bench/semantic.py --quick                     # 5,000 documents, under a minute
    python bench/semantic.py                             # ~58k real documents (exact and k-means)
    python bench/semantic.py --sizes small,large --out DIR   # and a million short ones

Corpora (``bench/corpora.py``, real text of this machine, no network):
``small`` is ``debian-entries`` (the paragraphs of ``/usr/share/doc/*/copyright``
and every whole ``changelog.Debian.gz`` entry, about 58,000 documents);
``large`` is ``debian-short-1000000``, the million short documents of
``bench/run.py --speed``.

Each corpus is embedded once with gpu_dedup's bundled model (WordLlama's
``l2_supercat`` 256-dimension token vectors, mean-pooled, L2-normalised;
``gpu_dedup.semantic.embed.bundled_model``); that time is reported once, on
its own. The embeddings are saved and every tool reads them:

* **gpu_dedup**: ``semantic_deduplicate(embeddings=emb, threshold=t,
  search="exact"|"kmeans", probe=2, seed=0)``; exact search on the small
  corpus only. Its process first makes one untimed call on 2,000 rows so
  that Numba's compiled kernels (cached on disk) are loaded.
* **semhash**: ``SemHash.from_embeddings(embeddings=emb, records=texts,
  model=...)`` then ``.self_deduplicate(threshold=t)``, its defaults
  otherwise: exact copies of a text are grouped first, then an approximate
  usearch index (vicinity's ``USEARCH`` backend, HNSW) is queried for 100
  neighbours a document (1,000 for those that fill 100; one whose 1,000 all
  reach the threshold is compared with every kept document), and documents
  are selected greedily in input order against the kept one of each
  neighbour at exact cosine >= t.
  The ``model`` is never called on this path (a stub that would load
  gpu_dedup's bundled model). Its result (strings) is mapped back to input
  positions: the first copy of a text in ``selected`` is kept, everything
  else was removed.
* **wordllama**: ``WordLlama.load("l2_supercat", dim=256,
  disable_download=True, cache_dir=<the wordllama package folder>)`` reads
  the weights and tokenizer shipped inside the wheel
  (``wordllama/weights/l2_supercat_256.safetensors``,
  ``wordllama/tokenizers/l2_supercat_tokenizer_config.json``); then
  ``wl.deduplicate(texts, threshold=t, return_indices=True)``, which returns
  the removed positions. It embeds the texts itself (the same model; its
  time *includes* embedding) and compares all pairs in float32 blocks,
  removing a document whose cosine to an earlier one (not removed by an
  earlier block) is ``> t``, strictly; it names no kept document.

Every run of a tool is its own process (``bench/measure.py``: peak RSS from
``wait4``, which includes loading its inputs: embeddings for gpu_dedup and
semhash, texts for semhash and WordLlama); ``seconds`` is the wall time of
the call(s) above inside it, the median of ``--repeats`` runs (3 on the
small corpus, 1 on the large by default).

Scores, from exact cosines (float64 products of the float32 embeddings, in
blocks), for each tool's kept set K and removed set R:

* **justified**: share of R with some document of K at cosine >= t;
* **residual**: share of K with another document of K at cosine >= t;
* **recall**: let D be the documents that have an *earlier* document of a
  *different text* at cosine >= t; recall is the share of D the tool
  removes. (A greedy rule may keep a document of D whose only earlier
  partners it removed, so exact greedy search is the reference here, not 1.)

A score whose products would take longer than ``--exact-budget`` seconds
(measured throughput) is estimated on ``--sample`` documents drawn uniformly
(of R, K or all documents) against all the others, and marked "sampled".

It also prints, on the small corpus, the share of exact search's removed
documents that k-means search also removes for probe 0, 1, 2 and 4, and a
threshold sweep of exact search with random removed examples beside the
document each names, to choose a default threshold.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import corpora  # noqa: E402
import results  # noqa: E402
from run import fmt_bytes, run_process  # noqa: E402

#: tool name -> (library, what it is called with)
TOOLS = {
    "gpu_dedup-exact": "semantic_deduplicate(embeddings=emb, search='exact')",
    "gpu_dedup-kmeans": "semantic_deduplicate(embeddings=emb, search='kmeans', probe=P)",
    "semhash": "SemHash.from_embeddings(emb, texts, model).self_deduplicate(threshold)",
    "wordllama": "WordLlama.load(disable_download=True).deduplicate(texts, threshold, "
                 "return_indices=True)",
}
#: exact search is all pairs: only on the small corpus
SMALL_ONLY = {"gpu_dedup-exact"}
SIZES = {"small": lambda n, d: corpora.debian_entries(n, data_dir=d),
         "large": lambda n, d: corpora.debian_short(1_000_000, data_dir=d)}
QUICK_DOCS = 5000
WARMUP_ROWS = 2000


# -- the tools, each in its own process -------------------------------------------

def read_jsonl_texts(path: str) -> list[str]:
    """The ``text`` of every line of a corpus file, in order."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


class _BundledEncoder:
    """semhash's ``model`` (an ``Encoder``): gpu_dedup's bundled model, loaded
    only if semhash encodes, which ``self_deduplicate`` never does."""

    _model = None

    def encode(self, inputs, **kwargs):
        if self._model is None:
            from gpu_dedup.semantic.embed import bundled_model
            self._model = bundled_model()
        return self._model.embed(list(inputs))


def _semhash_positions(texts: list[str], res) -> tuple[np.ndarray, np.ndarray]:
    """semhash's string result as ``(kept, duplicate_of)`` by input position.

    semhash groups exact copies of a text and keeps at most the first of each
    group (``selected`` holds it); every other record is in ``filtered``,
    naming the kept text it duplicates."""
    first: dict[str, int] = {}
    for i, t in enumerate(texts):
        first.setdefault(t, i)
    n = len(texts)
    if len(res.selected) + len(res.filtered) != n:
        raise RuntimeError(f"semhash returned {len(res.selected)} + {len(res.filtered)} "
                           f"records for {n}")
    kept = np.zeros(n, bool)
    for t in res.selected:
        kept[first[t]] = True
    names = {d.record: d.duplicate_of for d in res.filtered}
    dup = np.full(n, -1, np.int64)
    for i, t in enumerate(texts):
        if not kept[i]:
            dup[i] = first[names[t]]
    return kept, dup


def load_wordllama():
    """WordLlama's ``l2_supercat`` 256-dimension model from the files inside
    its wheel, never downloaded. ``load`` looks for the weights in the
    package's ``weights/`` folder but for the tokenizer in ``tokenizer/``
    (the wheel ships ``tokenizers/``), so the package folder is given as the
    cache, whose layout (``weights/``, ``tokenizers/``) it matches."""
    import wordllama
    from wordllama import WordLlama
    return WordLlama.load("l2_supercat", dim=256, disable_download=True,
                          cache_dir=os.path.dirname(os.path.abspath(wordllama.__file__)))


def tool_main(argv) -> int:
    """One timed run of one tool (the hidden ``_tool`` command): writes its
    kept mask, named duplicates and seconds to ``--result`` (npz)."""
    ap = argparse.ArgumentParser(prog="semantic.py _tool")
    ap.add_argument("tool", choices=list(TOOLS))
    ap.add_argument("--emb", required=True)
    ap.add_argument("--texts", required=True)
    ap.add_argument("--threshold", type=float, required=True)
    ap.add_argument("--probe", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--result", required=True)
    a = ap.parse_args(argv)
    extra: dict = {}
    if a.tool.startswith("gpu_dedup"):
        from gpu_dedup.semantic.api import semantic_deduplicate
        emb = np.load(a.emb)
        kw = dict(threshold=a.threshold, search=a.tool.split("-")[1], probe=a.probe, seed=a.seed)
        t = time.perf_counter()
        semantic_deduplicate(embeddings=emb[:WARMUP_ROWS], **kw)
        extra["warmup_seconds"] = time.perf_counter() - t
        t = time.perf_counter()
        res = semantic_deduplicate(embeddings=emb, **kw)
        seconds = time.perf_counter() - t
        kept, dup = np.asarray(res.kept, bool), np.asarray(res.duplicate_of, np.int64)
        extra["stats"] = {k: v for k, v in res.stats.items() if isinstance(v, (int, float, str))}
    elif a.tool == "semhash":
        from semhash import SemHash
        emb = np.load(a.emb)
        texts = read_jsonl_texts(a.texts)
        t = time.perf_counter()
        sh = SemHash.from_embeddings(embeddings=emb, records=texts, model=_BundledEncoder())
        built = time.perf_counter()
        res = sh.self_deduplicate(threshold=a.threshold)
        seconds = time.perf_counter() - t
        extra["index_seconds"] = built - t
        kept, dup = _semhash_positions(texts, res)
    else:
        texts = read_jsonl_texts(a.texts)
        t = time.perf_counter()
        wl = load_wordllama()
        extra["load_seconds"] = time.perf_counter() - t
        t = time.perf_counter()
        removed = wl.deduplicate(texts, threshold=a.threshold, return_indices=True)
        seconds = time.perf_counter() - t
        kept = np.ones(len(texts), bool)
        kept[np.asarray(removed, np.int64)] = False
        dup = np.full(len(texts), -1, np.int64)          # WordLlama names none
    np.savez(a.result, kept=kept, duplicate_of=dup, seconds=seconds,
             extra=json.dumps(extra, default=str))
    return 0


def run_tool(tool: str, emb_path: str, texts_path: str, threshold: float, probe: int,
             seed: int, work: str, timeout: float) -> dict:
    """One run of ``tool`` in its own process: its seconds, peak RSS and
    result, or an ``error``."""
    out = os.path.join(work, f"{tool}.npz")
    if os.path.exists(out):
        os.remove(out)
    cmd = [sys.executable, os.path.abspath(__file__), "_tool", tool, "--emb", emb_path,
           "--texts", texts_path, "--threshold", str(threshold), "--probe", str(probe),
           "--seed", str(seed), "--result", out]
    p = run_process(cmd, timeout)
    if p["timed_out"]:
        return {"error": f"timed out after {timeout:.0f} s", "process_seconds": p["seconds"]}
    if p["rc"] != 0 or not os.path.exists(out):
        return {"error": f"exit {p['rc']}: {p['stderr'][-500:]}"}
    with np.load(out) as z:
        r = {"seconds": float(z["seconds"]), "kept": z["kept"].copy(),
             "duplicate_of": z["duplicate_of"].copy(), **json.loads(str(z["extra"]))}
    os.remove(out)
    r.update(process_seconds=p["seconds"], peak_rss=p["peak_rss"],
             cpu_seconds=p.get("user_seconds", 0) + p.get("system_seconds", 0))
    return r


def bench_tool(tool: str, runs: int, **kw) -> dict:
    """``runs`` runs of ``tool``: median seconds, largest peak RSS, the last
    run's result (and whether every run removed the same documents)."""
    done = []
    for _ in range(runs):
        r = run_tool(tool, **kw)
        if "error" in r:
            return {"tool": tool, **r}
        done.append(r)
    last = done[-1]
    return {"tool": tool, "runs": len(done),
            "seconds": statistics.median(d["seconds"] for d in done),
            "all_seconds": [d["seconds"] for d in done],
            "peak_rss": max(d["peak_rss"] for d in done),
            "cpu_seconds": statistics.median(d["cpu_seconds"] for d in done),
            "same_every_run": all(np.array_equal(d["kept"], last["kept"]) for d in done),
            "kept": last["kept"], "duplicate_of": last["duplicate_of"],
            **{k: last[k] for k in ("warmup_seconds", "index_seconds", "load_seconds", "stats")
               if k in last}}


# -- exact cosines -------------------------------------------------------------------

class Exact:
    """Exact cosine queries over one corpus's embeddings: float64 products of
    the float32 rows, in blocks, with sampling when a query would take longer
    than ``budget`` seconds."""

    ROWS, COLS = 2048, 8192

    def __init__(self, emb: np.ndarray, texts: list[str], threshold: float, budget: float,
                 sample: int, seed: int):
        self.emb, self.t = emb, float(threshold)
        self.budget, self.sample = budget, sample
        self.rng = np.random.default_rng(seed)
        first: dict[str, int] = {}
        self.first = np.fromiter((first.setdefault(t, i) for i, t in enumerate(texts)),
                                 np.int64, len(texts))
        self.pairs_per_second = self._calibrate()

    def _calibrate(self) -> float:
        n = self.emb.shape[0]
        rows = np.arange(min(n, self.ROWS))
        cols = np.arange(min(n, self.COLS))
        t = time.perf_counter()
        self._scan(rows, cols, "other")
        return len(rows) * len(cols) / max(time.perf_counter() - t, 1e-6)

    def _scan(self, rows: np.ndarray, cols: np.ndarray, kind: str) -> np.ndarray:
        """Per row (sorted indices): is there a column (sorted) at cosine >=
        the threshold? ``kind``: "any" column, an "other" one than the row
        itself, or an "earlier" one of a different text."""
        out = np.zeros(len(rows), bool)
        for r0 in range(0, len(rows), self.ROWS):
            rb = rows[r0:r0 + self.ROWS]
            left = self.emb[rb].astype(np.float64)
            for c0 in range(0, len(cols), self.COLS):
                cb = cols[c0:c0 + self.COLS]
                if kind == "earlier" and cb[0] >= rb[-1]:
                    break
                r, c = np.nonzero(left @ self.emb[cb].astype(np.float64).T >= self.t)
                if kind == "other":
                    ok = rb[r] != cb[c]
                    r = r[ok]
                elif kind == "earlier":
                    ok = (cb[c] < rb[r]) & (self.first[cb[c]] != self.first[rb[r]])
                    r = r[ok]
                out[r0 + r] = True
        return out

    def hits(self, rows: np.ndarray, cols: np.ndarray, kind: str):
        """``(rows scanned, hit per scanned row, sampled?)``: all ``rows``, or
        a uniform sample of ``self.sample`` of them when scanning all would
        take longer than the budget."""
        rows, cols = np.sort(rows), np.sort(cols)
        share = 0.5 if kind == "earlier" else 1.0
        sampled = (len(rows) * len(cols) * share / self.pairs_per_second > self.budget
                   and len(rows) > self.sample)
        if sampled:
            rows = np.sort(self.rng.choice(rows, self.sample, replace=False))
        return rows, self._scan(rows, cols, kind), sampled

    def pair_cosines(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.empty(len(a))
        for s in range(0, len(a), 1 << 16):
            x = self.emb[a[s:s + (1 << 16)]].astype(np.float64)
            y = self.emb[b[s:s + (1 << 16)]].astype(np.float64)
            out[s:s + (1 << 16)] = np.einsum("ij,ij->i", x, y)
        return out


def score(ex: Exact, kept: np.ndarray, dup: np.ndarray, truth: dict) -> dict:
    """justified, residual and recall of one kept mask (module docstring)."""
    kept_i = np.flatnonzero(kept)
    removed_i = np.flatnonzero(~kept)
    out: dict = {"removed": int(len(removed_i)), "kept": int(len(kept_i))}
    if len(removed_i):
        # a removed document's named kept document at cosine >= t justifies it
        # at once; the others are looked up against every kept document
        named = dup[removed_i]
        ok = np.zeros(len(removed_i), bool)
        has = named >= 0
        if has.any():
            has &= np.where(has, kept[np.maximum(named, 0)], False)
            ok[has] = ex.pair_cosines(removed_i[has], named[has]) >= ex.t
        rest = removed_i[~ok]
        out["justified_by_named"] = int(ok.sum())
        if len(rest):
            rows, hit, sampled = ex.hits(rest, kept_i, "any")
            # share of all removed: those justified by their named document,
            # plus the (sampled) share of the rest that a kept document justifies
            out["justified"] = (ok.sum() + hit.mean() * len(rest)) / len(removed_i)
            out["justified_sampled"] = sampled
            out["justified_rows"] = int(len(rows))
        else:
            out["justified"], out["justified_sampled"] = 1.0, False
    rows, hit, sampled = ex.hits(kept_i, kept_i, "other")
    out.update(residual=float(hit.mean()) if len(rows) else 0.0, residual_sampled=sampled,
               residual_rows=int(len(rows)))
    d = truth["rows"][truth["hit"]]
    out["recall"] = float((~kept[d]).mean()) if len(d) else float("nan")
    out["recall_sampled"] = truth["sampled"]
    return out


# -- the benchmark -------------------------------------------------------------------

def load_corpus(size: str, n_docs, data_dir) -> tuple:
    spec = SIZES[size](n_docs, data_dir)
    return spec, read_jsonl_texts(spec.path)


def embed(texts: list[str], path: str) -> tuple[np.ndarray, float, str]:
    from gpu_dedup.semantic.embed import bundled_model
    t = time.perf_counter()
    model = bundled_model()
    emb = model.embed(texts)
    seconds = time.perf_counter() - t
    np.save(path, emb)
    return emb, seconds, model.name


def model_agreement(texts: list[str], emb: np.ndarray, n: int = 2000, seed: int = 0) -> dict:
    """Cosine between WordLlama's own embedding of a text and gpu_dedup's, on
    ``n`` random texts (both normalised): how much the two embedders of the
    same model differ."""
    wl = load_wordllama()
    pick = np.sort(np.random.default_rng(seed).choice(len(texts), min(n, len(texts)),
                                                      replace=False))
    theirs = wl.embed([texts[i] for i in pick], norm=True).astype(np.float64)
    cos = np.einsum("ij,ij->i", np.nan_to_num(theirs), emb[pick].astype(np.float64))
    return {"texts": int(len(pick)), "median": float(np.median(cos)), "min": float(cos.min()),
            "share_above_0.999": float((cos > 0.999).mean())}


def probe_recall(emb: np.ndarray, threshold: float, probes, seed: int, say) -> list[dict]:
    """k-means beside exact search on the same embeddings, in this process."""
    from gpu_dedup.semantic.api import semantic_deduplicate
    semantic_deduplicate(embeddings=emb[:WARMUP_ROWS], threshold=threshold, search="kmeans")
    t = time.perf_counter()
    exact = semantic_deduplicate(embeddings=emb, threshold=threshold, search="exact")
    exact_s = time.perf_counter() - t
    gone = ~exact.kept
    rows = [{"search": "exact", "probe": None, "seconds": exact_s, "removed": int(gone.sum()),
             "recall_vs_exact": 1.0}]
    for p in probes:
        t = time.perf_counter()
        r = semantic_deduplicate(embeddings=emb, threshold=threshold, search="kmeans", probe=p,
                                 seed=seed)
        s = time.perf_counter() - t
        rec = float((~r.kept[gone]).mean()) if gone.any() else float("nan")
        rows.append({"search": "kmeans", "probe": p, "seconds": s,
                     "removed": int((~r.kept).sum()), "recall_vs_exact": rec,
                     "removed_not_by_exact": int((~r.kept & exact.kept).sum()),
                     "compared": r.stats.get("compared")})
    say("| search | probe | seconds (1 run, in process) | removed | of exact's removed, also "
        "removed | removed that exact keeps | pairs compared |")
    say("|---|---|---|---|---|---|---|")
    for r in rows:
        probe = "–" if r["probe"] is None else r["probe"]
        say(f"| {r['search']} | {probe} | {r['seconds']:.2f} | "
            f"{r['removed']:,} | {100 * r['recall_vs_exact']:.2f}% | "
            f"{r.get('removed_not_by_exact', 0):,} | {r.get('compared') or '–'} |")
    return rows


def _short(text: str, n: int = 100) -> str:
    t = " ".join(text.split())
    return (t[:n] + "…" if len(t) > n else t).replace("|", "\\|")


def sweep(emb: np.ndarray, texts: list[str], thresholds, examples: int, seed: int,
          say) -> list[dict]:
    """Exact search at each threshold: removed count and random examples."""
    from gpu_dedup.semantic.api import semantic_deduplicate
    rng = np.random.default_rng(seed)
    rows = []
    for t in thresholds:
        s = time.perf_counter()
        r = semantic_deduplicate(embeddings=emb, threshold=t, search="exact")
        s = time.perf_counter() - s
        gone = np.flatnonzero(~r.kept)
        different = gone[[texts[i] != texts[r.duplicate_of[i]] for i in gone]]
        pick = np.sort(rng.choice(different, min(examples, len(different)), replace=False))
        ex = [{"doc": int(i), "duplicate_of": int(r.duplicate_of[i]),
               "cosine": float(r.similarity[i]), "text": texts[i][:100],
               "kept_text": texts[r.duplicate_of[i]][:100]} for i in pick]
        rows.append({"threshold": t, "seconds": s, "removed": int(len(gone)),
                     "removed_not_identical": int(len(different)), "examples": ex})
        say(f"**threshold {t:g}**: {len(gone):,} removed ({len(different):,} not identical "
            f"to the text they name), {s:.1f} s. Random removed examples (not identical):")
        say()
        say("| cosine | removed document | kept document it names |")
        say("|---|---|---|")
        for e in ex:
            say(f"| {e['cosine']:.4f} | {_short(e['text'])} | {_short(e['kept_text'])} |")
        say()
    return rows


def fmt_share(x, sampled=False) -> str:
    if x is None:
        return "–"
    return f"{100 * x:.2f}%" + (" (sampled)" if sampled else "")


def table(rows: list[dict]) -> str:
    lines = ["| corpus | tool | runs | seconds (median) | CPU s | peak RSS | removed | justified "
             "| residual | recall | ≠ exact | notes |", "|" + "---|" * 12]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['corpus']} | {r['tool']} |" + " – |" * 9
                         + f" {r['error'].splitlines()[-1][:100]} |")
            continue
        notes = []
        if r["tool"] == "wordllama":
            notes.append("includes embedding the texts")
        if r["tool"] == "semhash":
            notes.append(f"index build {r['index_seconds']:.1f} s")
        if not r["same_every_run"]:
            notes.append("runs removed different documents")
        differs = f"{r['differs_from_exact']:,}" if "differs_from_exact" in r else "–"
        lines.append(
            f"| {r['corpus']} | {r['tool']} | {r['runs']} | {r['seconds']:.2f} | "
            f"{r['cpu_seconds']:.1f} | {fmt_bytes(r['peak_rss'])} | {r['removed']:,} | "
            f"{fmt_share(r.get('justified'), r.get('justified_sampled'))} | "
            f"{fmt_share(r['residual'], r['residual_sampled'])} | "
            f"{fmt_share(r['recall'], r['recall_sampled'])} | {differs} | {'; '.join(notes)} |")
    return "\n".join(lines)


def versions() -> dict:
    return {m: results._version(m) for m in ("gpu-dedup", "numpy", "semhash", "vicinity",
                                             "usearch", "model2vec", "wordllama")}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_tool"]:
        return tool_main(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="small", help="corpora: small, large or small,large")
    ap.add_argument("--quick", action="store_true",
                    help=f"a trial: the first {QUICK_DOCS:,} documents of the small corpus, 1 run")
    ap.add_argument("--threshold", type=float, default=0.9)
    ap.add_argument("--repeats", type=int, default=None,
                    help="runs per tool (default 3 on the small corpus, 1 on the large)")
    ap.add_argument("--tools", default=",".join(TOOLS), help=f"of {', '.join(TOOLS)}")
    ap.add_argument("--probe", type=int, default=2, help="gpu_dedup k-means probe")
    ap.add_argument("--probes", default="0,1,2,4", help="k-means beside exact, small corpus")
    ap.add_argument("--sweep", default="0.80,0.85,0.90,0.95,0.98",
                    help="thresholds of the exact-search sweep, small corpus ('' for none)")
    ap.add_argument("--examples", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=3600, help="seconds a tool's run may take")
    ap.add_argument("--exact-budget", type=float, default=1200,
                    help="seconds an exact score may take before it is sampled")
    ap.add_argument("--sample", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", default=None, help="corpus cache (default bench/data)")
    ap.add_argument("--work", default=None, help="embeddings and results of the tools' "
                    "processes (default a temporary folder, removed)")
    ap.add_argument("--out", default=None, help="write semantic.md and semantic.json here")
    a = ap.parse_args(argv)
    sizes = [s for s in a.sizes.split(",") if s]
    if a.quick:
        sizes = ["small"]
    tools = [t for t in a.tools.split(",") if t]
    bad = [s for s in sizes if s not in SIZES] + [t for t in tools if t not in TOOLS]
    if bad:
        raise SystemExit(f"unknown size or tool: {', '.join(bad)}")
    if not corpora.debian_files_available():
        raise SystemExit(f"no files match {corpora.DEBIAN_GLOB}: no corpus")
    work = a.work or tempfile.mkdtemp(prefix="semantic-bench-")
    os.makedirs(work, exist_ok=True)

    lines = results.Lines()
    say = lines.say
    m = results.machine()
    v = versions()
    say(f"Machine: {m['date']}; {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, "
        f"load {m['load_average']}; Python {m['python']}, commit {m['commit']}; "
        + ", ".join(f"{k} {x}" for k, x in v.items()) + ".")
    say(f"Threshold {a.threshold:g} (cosine), the same embeddings for every tool but WordLlama, "
        f"which embeds the texts itself with its copy of the same model.")
    say()
    data = {"machine": m, "versions": v, "threshold": a.threshold, "calls": TOOLS,
            "corpora": [], "rows": []}
    rows = []
    try:
        for size in sizes:
            spec, texts = load_corpus(size, QUICK_DOCS if a.quick else None, a.data)
            n = len(texts)
            print(f"  {spec.name}: {n:,} documents; embedding ...", flush=True)
            emb_path = os.path.join(work, f"{spec.name}.emb.npy")
            emb, embed_s, model_name = embed(texts, emb_path)
            identical = int(n - len(set(texts)))
            agree = model_agreement(texts, emb, seed=a.seed) if "wordllama" in tools else None
            print(f"  exact truth ({n:,} documents) ...", flush=True)
            ex = Exact(emb, texts, a.threshold, a.exact_budget, a.sample, a.seed)
            t = time.perf_counter()
            t_rows, t_hit, t_sampled = ex.hits(np.arange(n), np.arange(n), "earlier")
            truth = {"rows": t_rows, "hit": t_hit, "sampled": t_sampled}
            truth_s = time.perf_counter() - t
            d_share = float(t_hit.mean())
            corpus = {"name": spec.name, "size": size, "documents": n, "bytes": spec.bytes,
                      "description": spec.description, "model": model_name,
                      "embed_seconds": embed_s, "identical_texts_removable": identical,
                      "truth_share": d_share, "truth_sampled": t_sampled,
                      "truth_rows": int(len(t_rows)), "truth_seconds": truth_s,
                      "float64_pairs_per_second": ex.pairs_per_second,
                      "wordllama_agreement": agree}
            data["corpora"].append(corpus)
            say(f"**{spec.name}**: {spec.description}; {spec.bytes / 2 ** 20:.1f} MiB of text, "
                f"{identical:,} documents repeat an earlier text exactly. Embedding "
                f"({model_name}, once, not counted in any tool's seconds but WordLlama's): "
                f"{embed_s:.1f} s. Documents with an earlier document of a different text at "
                f"cosine >= {a.threshold:g} (the recall set D): {100 * d_share:.2f}%"
                + (f" (sampled: {len(t_rows):,} documents)" if t_sampled else
                   f" ({int(t_hit.sum()):,})") + ".")
            if agree:
                say(f"WordLlama's own embedding beside gpu_dedup's, {agree['texts']:,} random "
                    f"texts: median cosine {agree['median']:.6f}, lowest {agree['min']:.4f}, "
                    f"{100 * agree['share_above_0.999']:.1f}% above 0.999.")
            say()
            kept_of: dict[str, np.ndarray] = {}
            for tool in tools:
                if tool in SMALL_ONLY and size != "small":
                    continue
                runs = a.repeats or (1 if a.quick or size == "large" else 3)
                print(f"  {spec.name}: {tool}, {runs} run(s) ...", flush=True)
                r = bench_tool(tool, runs, emb_path=emb_path, texts_path=spec.path,
                               threshold=a.threshold, probe=a.probe, seed=a.seed, work=work,
                               timeout=a.timeout)
                r["corpus"] = spec.name
                if "error" not in r:
                    kept_of[tool] = r.pop("kept")
                    r.update(score(ex, kept_of[tool], r.pop("duplicate_of"), truth))
                print(f"    {r.get('seconds', float('nan')):.2f} s, "
                      f"{r.get('removed', '–')} removed {r.get('error', '')}", flush=True)
                rows.append(r)
            if "gpu_dedup-exact" in kept_of:
                for r in rows:
                    if r["corpus"] == spec.name and r["tool"] in kept_of:
                        r["differs_from_exact"] = int(
                            (kept_of[r["tool"]] != kept_of["gpu_dedup-exact"]).sum())
            del kept_of
            if size == "small":
                probes = [int(x) for x in a.probes.split(",") if x]
                if probes:
                    say(f"k-means beside exact search on {spec.name} (gpu_dedup, threshold "
                        f"{a.threshold:g}): the share of the documents exact search removes "
                        f"that k-means search also removes.")
                    say()
                    data["probes"] = probe_recall(emb, a.threshold, probes, a.seed, say)
                    say()
                thresholds = [float(x) for x in a.sweep.split(",") if x]
                if thresholds:
                    say(f"Threshold sweep, gpu_dedup exact search on {spec.name}:")
                    say()
                    data["sweep"] = sweep(emb, texts, thresholds, a.examples, a.seed, say)
            del emb, ex
    finally:
        if a.work is None:
            shutil.rmtree(work, ignore_errors=True)
    data["rows"] = rows
    say(table(rows))
    say()
    say("seconds: wall time of the call inside the tool's own process (median of the runs), "
        "without the embedding but for WordLlama, which embeds the texts itself. CPU s, peak "
        "RSS: the whole process (loading its inputs included). justified: share of removed "
        "documents with a kept document at exact cosine >= the threshold. residual: share of "
        "kept documents with another kept document at exact cosine >= the threshold. recall: "
        "share of the documents that have an earlier document of a different text at exact "
        "cosine >= the threshold that the tool removes. ≠ exact: documents whose fate (kept or "
        "removed) differs from gpu_dedup's exact search. \"sampled\": estimated on "
        f"{a.sample:,} documents drawn uniformly, against all.")
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "semantic.md"), "w") as f:
            f.write("\n".join(lines).rstrip() + "\n")
        with open(os.path.join(a.out, "semantic.json"), "w") as f:
            json.dump(data, f, indent=1, default=str)
            f.write("\n")
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
