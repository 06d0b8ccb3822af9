"""The layout of a work directory: every key a store holds, named once.

A store (:mod:`gpu_dedup.engine.store`) holds files under relative keys
such as ``read/f00000c000000/text.arrow``; a unit of work named ``NAME`` is
complete when its marker ``NAME.done`` exists. Every engine module builds
its keys through this module, never by hand. Each folder is named after
the stage that writes it (the substring stages' folders carry the seed of
their unit hashes). A disk store's unit folder, ``ROOT/NAME-HASH``
(:func:`gpu_dedup.engine.store.work_dir_for`), holds::

    .lock                         the run holding the folder (DiskStore.open)
    input/texts                   the array a library call deduplicates
                                  (memory store only): shell; read
    read/                         written by read; read by every later stage
      {chunk}/                    one chunk of an input (chunk_key: f{file}c{k})
        text.arrow                its texts: normalized (near-duplicates),
                                  as read (substrings)
        loc.npy                   each record's line (row, file) number: outputs
        ids.arrow, idfp.npy       its ids and their 128-bit fingerprints: read
                                  (unique ids), outputs
        fp.npy, active.npy        128-bit text fingerprints, has shingles: exact
        lengths.npy               code points per text (keep="longest"): select,
                                  assign
      {chunk}.done
      ids/{parts}/c{c}/           chunk c's id fingerprints ordered by
                                  partition (as exact/{parts}/c{c}/; deleted
                                  once the ids are checked)
    exact/                        written by exact; read by signatures, select,
                                  assign
      {parts}/p{p}/               one partition of the fingerprint space
        reps.npy, members.npy, member_rep.npy        (+ p{p}.done)
        pair_rep.npy, pair_member.npy   its (representative, member) pairs,
                                  sorted by representative
        pair_member_len.npy       their members' lengths (keep="longest")
      {parts}/c{c}/               chunk c's fingerprints ordered by
                                  partition: fp.npy, ix.npy (positions),
                                  bounds.npy, lengths.npy (keep="longest"),
                                  from exact_tasks.SPLIT_PARTS partitions
                                  on (+ c{c}.done; deleted once the stage
                                  is done)
      {parts}/s{c}/               the documents of chunk c, from every
                                  partition: its slice of each array below
                                  (+ s{c}.done; deleted once the stage is done)
      reps.npy                    the representatives' positions, sorted
      members.npy, member_rep.npy every other document of a group of
                                  identical texts, and its representative
      member_group.npy            each member's representative's number
      pair_rep.npy, pair_member.npy   the same pairs sorted by representative
      pair_member_len.npy         their members' lengths (keep="longest")
    signatures/                   written by signatures; read by buckets,
                                  select (band keys, signature scores)
      r{r0}.keys.npy              band keys of a block of representatives
      r{r0}.sig.npy               their MinHash signatures (when scored by them)
      r{r0}.bounds.npy            their bound rows (greedy selection, exact Jaccard)
      r{r0}.done
    buckets/                      written by buckets; read by select
      p{parts}g{g}/u{index}.off.npy, .members.npy   a unit's buckets (greedy)
      p{parts}g{g}/u{index}.npy   a unit's candidate pairs (components)
      p{parts}g{g}/u{index}.done
      p{parts}g{g}/s{first}/r{r0}.keys.npy, .pos.npy, .off.npy   the keys of a
                                  signature block in the bands of the units
                                  from ``first`` on (every partition), ordered
                                  by partition, with their positions in the
                                  block: a sweep's, deleted at its end
      p{parts}g{g}/r{ranges}/     greedy selection range by range of ranks:
        u{index}/g{group}.off.npy, .members.npy     a unit's buckets, in rank
                                  space, by the range of their first member
        g{group}.off.npy, .members.npy  a group's distinct buckets (+ .done)
        g{group}/k{range}.npy     their entries in a range (bucket, rank, place)
      pos_rank.npy, pos_of_rank.npy, best.npy   keep="longest": the rank
                                  of each representative, the representative
                                  of each rank, the document each group keeps
      priority/                   where those are computed: c{chunk}/ (best,
                                  best_len, rank of its representatives),
                                  route/c{chunk}/p{part}.npy, order/p{part}.npy,
                                  inverse/p{part}/c{chunk}.npy
      first_round.npy             all candidate pairs (components)
    select/                       written by select; read by assign
      accepted_a.npy, accepted_b.npy, scores.npy   the accepted pairs
                                  (two columns of representative numbers) and
                                  their similarity
      best.npy, rep_kept.npy, rep_dup.npy, rep_sim.npy   (greedy)
      ranges/k{range}/removed.npy, duplicate_of.npy, similarity.npy, pair_a.npy,
                                  pair_b.npy, pair_scores.npy: what a range of
                                  ranks decided
      ranked/k{range}/c{chunk}/removed.npy, pairs.npy   keep="longest": a
                                  range's decisions routed to the chunk of
                                  their representative (deleted once written)
      batches/k{range}/c{call}/b{i}.npy   one batch of scores of a range of
                                  ranks (greedy), batches/c{call}/b{i}.npy
                                  (components; disk store; + .done)
    assign/                       written by assign; read by the outputs
      {chunk}/                    one chunk's documents
        cluster.npy, kept.npy, duplicate_of.npy, similarity.npy
        pair_a.npy, pair_b.npy, pair_similarity.npy, pair_exact.npy: the
                                  pairs whose first document is in the chunk
        targets.npy, target_counts.npy: the clusters its documents join
                                  (other than their own), and how many join
        removed_labels.npy        the clusters of its removed documents
      {chunk}.done
      batches/c{call}/b{i}.npy    assign's own batches of scores (+ .done)
    hash{seed}/                   written by hash; read by vocab, windows, cut
      {chunk}/                    wh.npy, ws.npy (windows' hashes and first
                                  units, sorted), vh.npy, vocab.arrow (the
                                  vocabulary, sorted), uh.npy, units.npy
      uh.npy                      every unit's hash, chunks end to end
      doc_units.npy               each document's first unit
    vocab{seed}/{parts}/p{p}.done whether a hash range has two units with one
                                  hash: vocab
    windows{seed}/{parts}/p{p}/   written by windows; read by cut
      rm_start.npy, rm_first.npy  removed windows and their first occurrence
    cut{seed}/{parts}/{chunk}/    written by cut; read by the outputs
      text.arrow, units.npy, removed.npy, span_doc.npy, span_start.npy,
      span_end.npy, span_first.npy
    stage/                        the stage markers
      {stage}.done                read, exact, signatures, buckets, select,
                                  assign; hash{seed} (a stage's marker also
                                  lists the files of its units later stages read)

Numbers in names are zero-padded to a fixed width (``p00003``,
``r000000000512``) so that names sort in order.
"""
from __future__ import annotations

#: The lock file at the top of a disk store.
LOCK = ".lock"
#: What a unit's marker adds to its name.
MARKER = ".done"

# -- folders ---------------------------------------------------------------------

INPUT = "input"
READ = "read"
EXACT = "exact"
SIGNATURES = "signatures"
BUCKETS = "buckets"
SELECT = "select"
ASSIGN = "assign"
STAGE = "stage"
HASH = "hash"
VOCAB = "vocab"
WINDOWS = "windows"
CUT = "cut"
EMBED = "embed"

#: The folders of a work directory, by their names as written.
FOLDERS = (INPUT, READ, EXACT, SIGNATURES, BUCKETS, SELECT, ASSIGN, STAGE, EMBED)
#: Folders written once per seed of the unit hashes: ``NAME{seed}``.
SEEDED = (HASH, VOCAB, WINDOWS, CUT)
#: The folders each runner's stages write (besides ``input``).
NEAR_DUPLICATE_FOLDERS = (READ, EXACT, SIGNATURES, BUCKETS, SELECT, ASSIGN, STAGE)
SUBSTRING_FOLDERS = (READ, STAGE) + SEEDED
SEMANTIC_FOLDERS = (READ, EMBED, SELECT, ASSIGN, STAGE)


def file(unit: str, name: str) -> str:
    """File ``name`` of a unit: in the unit's folder (``text.arrow``), or,
    when ``name`` starts with a dot (``.keys.npy``), beside its marker."""
    return unit + name if name.startswith(".") else f"{unit}/{name}"


def files(unit: str, names) -> list[str]:
    """The files ``names`` of a unit (:func:`file`), in order."""
    return [file(unit, n) for n in names]


def stage(name: str) -> str:
    """The unit whose marker says stage ``name`` is complete."""
    return f"{STAGE}/{name}"


# -- input ----------------------------------------------------------------------

#: The texts of a library call over an array, read by the ``read`` stage.
INPUT_TEXTS = f"{INPUT}/texts"

# -- read -------------------------------------------------------------------------

TEXT = "text.arrow"
LOC = "loc.npy"
IDS = "ids.arrow"
IDFP = "idfp.npy"
FP = "fp.npy"
ACTIVE = "active.npy"
LENGTHS = "lengths.npy"


def chunk_key(file_index: int, k: int) -> str:
    """The key of chunk ``k`` of input ``file_index``: a read unit's chunk
    (:func:`gpu_dedup.io.plan.plan_reads` numbers them), or one piece of a
    compressed stream."""
    return f"f{file_index:05d}c{k:06d}"


def chunk(key: str) -> str:
    """The read unit of the chunk ``key``: its folder, and its marker's name."""
    return f"{READ}/{key}"


def chunk_file(key: str, name: str) -> str:
    """File ``name`` (``TEXT``, ``LOC``, ...) of the chunk ``key``."""
    return file(chunk(key), name)


# -- exact --------------------------------------------------------------------------

#: The arrays of an exact partition and of the whole stage, ``NAME.npy``.
EXACT_ARRAYS = ("reps", "members", "member_rep")
#: What the whole stage adds for the assign stage: each member's
#: representative's number, and the pairs (representative, member) sorted
#: by representative.
EXACT_FOR_ASSIGN = ("member_group", "pair_rep", "pair_member")


def fingerprint_split(name: str, parts: int, c: int) -> str:
    """The unit of chunk ``c``'s fingerprints ``name`` (:data:`FP`, read by
    the ``exact`` stage; :data:`IDFP`, by the ``read`` stage's check of
    unique ids) ordered by their partition of ``parts``, with the bounds of
    each partition: every partition task reads its own slice of each chunk,
    so the fingerprints are read once however many partitions there are."""
    folder = EXACT if name == FP else f"{READ}/ids"
    return f"{folder}/{parts}/c{c:06d}"


def exact_part(parts: int, p: int) -> str:
    """The unit of partition ``p`` of ``parts`` of the fingerprint space."""
    return f"{EXACT}/{parts}/p{p:05d}"


#: With ``keep="longest"``, beside ``pair_member``: each member's length in
#: code points (read by the keep priority, :mod:`gpu_dedup.engine.priority`,
#: so that no task reads the lengths of other chunks).
PAIR_LENGTHS = "pair_member_len"


def exact_pair_arrays(longest: bool) -> tuple:
    """The (representative, member) pairs' arrays of a partition and of a
    slice, sorted together: with :data:`PAIR_LENGTHS` when ``longest``."""
    return ("pair_rep", "pair_member") + ((PAIR_LENGTHS,) if longest else ())


def exact_slice_arrays(longest: bool) -> tuple:
    """The arrays of a slice of positions (:func:`exact_slice`), merged from
    the partitions, concatenated slice after slice into the stage's arrays."""
    return EXACT_ARRAYS + exact_pair_arrays(longest)


def exact_slice(parts: int, c: int) -> str:
    """The unit of the positions of chunk ``c``, merged from ``parts`` partitions."""
    return f"{EXACT}/{parts}/s{c:06d}"


def exact(name: str) -> str:
    """The stage's array ``name`` (of :data:`EXACT_ARRAYS`)."""
    return f"{EXACT}/{name}.npy"


# -- signatures ---------------------------------------------------------------------

#: Files beside a signature block's marker: band keys, signatures, and the
#: bound rows of greedy selection (:mod:`gpu_dedup.engine.bounds`).
KEYS = ".keys.npy"
SIGS = ".sig.npy"
BOUNDS = ".bounds.npy"


def block_key(r0: int) -> str:
    """The key of the block of representatives starting at ``r0``."""
    return f"r{r0:012d}"


def signature_block(key: str) -> str:
    """The unit of the signature block ``key``."""
    return f"{SIGNATURES}/{key}"


def signature_file(key: str, name: str) -> str:
    """File ``name`` (``KEYS``, ``SIGS``, ``BOUNDS``) of the signature block ``key``."""
    return file(signature_block(key), name)


# -- buckets ------------------------------------------------------------------------

#: Files beside a bucket unit's marker: its buckets' offsets and members
#: (greedy selection), or its candidate pairs (components).
OFF = ".off.npy"
MEMBERS = ".members.npy"
EDGES = ".npy"

#: keep="longest": the rank of each representative, the representative of
#: each rank, and the document each group of identical texts keeps
#: (:mod:`gpu_dedup.engine.priority`).
POS_RANK = f"{BUCKETS}/pos_rank.npy"
POS_OF_RANK = f"{BUCKETS}/pos_of_rank.npy"
BEST = f"{BUCKETS}/best.npy"
FIRST_ROUND = f"{BUCKETS}/first_round.npy"
#: Where the keep priority is computed, by chunk and by part of the order.
PRIORITY = f"{BUCKETS}/priority"


def priority_chunk(c: int, name: str) -> str:
    """Array ``name`` of chunk ``c``'s representatives (``best``,
    ``best_len``: their kept document and its length; ``rank``)."""
    return f"{PRIORITY}/c{c:06d}/{name}.npy"


def priority_route(c: int, part: int) -> str:
    """The keys of chunk ``c``'s representatives that fall in part ``part``
    of the priority order."""
    return f"{PRIORITY}/route/c{c:06d}/p{part:05d}.npy"


def priority_order(part: int) -> str:
    """The representatives of part ``part`` of the priority order, in it."""
    return f"{PRIORITY}/order/p{part:05d}.npy"


def priority_inverse(part: int, c: int) -> str:
    """(representative, rank) of part ``part`` whose representative is in
    chunk ``c``."""
    return f"{PRIORITY}/inverse/p{part:05d}/c{c:06d}.npy"


def bucket_layout(parts: int, bands_per_unit: int) -> str:
    """The folder name of a layout of bucket units: ``parts`` partitions of
    the key space, ``bands_per_unit`` bands a unit."""
    return f"p{parts}g{bands_per_unit}"


def bucket_unit(layout: str, index: int) -> str:
    """Bucket unit ``index`` of ``layout`` (:func:`bucket_layout`)."""
    return f"{BUCKETS}/{layout}/u{index:05d}"


POSITIONS = ".pos.npy"


def bucket_spill(layout: str, first: int, key: str, name: str) -> str:
    """File ``name`` (``KEYS``, ``POSITIONS``, ``OFF``) of the keys of
    signature block ``key`` in the bands of the bucket units of ``layout``
    from ``first`` on, ordered by key partition."""
    return f"{BUCKETS}/{layout}/s{first:05d}/{key}{name}"


def ranges_folder(layout: str, ranges: int) -> str:
    """Where the buckets of ``layout`` are cut into ``ranges`` rank ranges."""
    return f"{BUCKETS}/{layout}/r{ranges}"


def route_unit(folder: str, index: int) -> str:
    """The unit that sorts bucket unit ``index``'s buckets by group, under
    ``folder`` (:func:`ranges_folder`)."""
    return f"{folder}/u{index:05d}"


def route_file(unit: str, group: int, name: str) -> str:
    """A routed unit's buckets of ``group``: ``name`` is ``OFF`` or ``MEMBERS``."""
    return file(unit, f"g{group:05d}{name}")


def bucket_group(folder: str, group: int) -> str:
    """The unit of ``group``'s distinct buckets (files ``OFF``, ``MEMBERS``)."""
    return f"{folder}/g{group:05d}"


def group_entries(group_unit: str, k: int) -> str:
    """A group's entries whose rank falls in range ``k``."""
    return file(group_unit, f"k{k:05d}.npy")


# -- select and assign --------------------------------------------------------------

#: The select stage's arrays, ``NAME.npy``: of both ways of clustering,
#: and of greedy selection only. The accepted pairs of representative
#: numbers are two int64 arrays, ``accepted_a < accepted_b``, sorted by
#: ``(a, b)``: no pair is packed into one word, whatever the numbers.
SELECTED = ("accepted_a", "accepted_b", "scores")
SELECTED_GREEDY = SELECTED + ("best", "rep_kept", "rep_dup", "rep_sim")
#: The per-document and per-pair result arrays of the assign stage.
FINAL = ("cluster", "kept", "duplicate_of", "similarity", "pair_a", "pair_b",
         "pair_similarity", "pair_exact")
#: Where each stage that scores pairs keeps its batches of scores (select:
#: one folder a range of ranks, :func:`range_batches`).
SELECT_BATCHES = f"{SELECT}/batches"
ASSIGN_BATCHES = f"{ASSIGN}/batches"
#: The file beside a batch's marker: its scores.
BATCH = ".npy"


def selected(name: str) -> str:
    """The select stage's array ``name`` (of :data:`SELECTED_GREEDY`)."""
    return f"{SELECT}/{name}.npy"


#: What the select stage keeps of each range of ranks it decided.
RANGE_ARRAYS = ("removed", "duplicate_of", "similarity", "pair_a", "pair_b", "pair_scores")


def range_result(k: int, name: str) -> str:
    """Array ``name`` (of :data:`RANGE_ARRAYS`) of what range ``k`` decided."""
    return f"{SELECT}/ranges/k{k:05d}/{name}.npy"


def ranked_spill(k: int, c: int, name: str) -> str:
    """keep="longest": what range ``k`` decided about the representatives
    of chunk ``c`` (``removed``: representative, kept one, similarity bits;
    ``pairs``: first and second representative, score bits), until the
    chunk's slices of the select stage's arrays are written."""
    return f"{SELECT}/ranked/k{k:05d}/c{c:06d}/{name}.npy"


def range_carry(dest: int, src: int) -> str:
    """The state of buckets range ``src`` passes on to range ``dest``
    (:class:`~gpu_dedup.stages.select_ranges.RangeState`); deleted once read."""
    return f"{SELECT}/carry/k{dest:05d}/from{src:05d}.npy"


def range_batches(k: int) -> str:
    """Where the select stage keeps the batches of scores of range ``k``."""
    return f"{SELECT_BATCHES}/k{k:05d}"


#: What a chunk's assign unit writes besides :data:`FINAL`.
TARGETS = ("targets", "target_counts", "removed_labels")


def assign_chunk(key: str) -> str:
    """The assign unit of the chunk ``key``."""
    return f"{ASSIGN}/{key}"


def final_file(key: str, name: str) -> str:
    """Array ``name`` (of :data:`FINAL` or :data:`TARGETS`) of the chunk ``key``."""
    return file(assign_chunk(key), f"{name}.npy")


def embed_chunk(key: str) -> str:
    """The embed unit of the chunk ``key`` (semantic deduplication): its
    ``EMBEDDINGS`` (float32, a row a document) and, for ``keep="longest"``,
    ``LENGTHS``."""
    return f"{EMBED}/{key}"


#: A chunk's embeddings (semantic deduplication).
EMBEDDINGS = "embeddings.npy"


#: The files of a scorer's stored shingle sets (:func:`shared_sets`): the
#: representatives' positions (sorted), each set's offset, the sets' values.
SETS = ("positions.npy", "offsets.npy", "values.npy")


def shared_sets(prefix: str) -> str:
    """The unit of the shingle sets a scorer whose batches live under
    ``prefix`` shares with tasks in other processes (:data:`SETS`); deleted
    when the scorer is done with them."""
    return f"{prefix}/sets"


def score_batch(prefix: str, call: int, i: int) -> str:
    """The unit of batch ``i`` of call ``call`` of a scorer whose batches
    live under ``prefix`` (:data:`SELECT_BATCHES`, :data:`ASSIGN_BATCHES`)."""
    return f"{prefix}/c{call:03d}/b{i:06d}"


# -- the substring stages -----------------------------------------------------------

#: What a chunk's ``hash`` unit writes.
HASH_FILES = ("wh.npy", "ws.npy", "vh.npy", "vocab.arrow", "uh.npy", "units.npy")
#: What the ``hash`` stage writes over every chunk.
UNIT_HASHES = "uh.npy"
DOC_UNITS = "doc_units.npy"
#: What a ``windows`` unit writes.
WINDOWS_FILES = ("rm_start.npy", "rm_first.npy")
#: What a chunk's ``cut`` unit writes.
CUT_FILES = ("text.arrow", "units.npy", "removed.npy", "span_doc.npy", "span_start.npy",
             "span_end.npy", "span_first.npy")


def seeded(folder: str, seed: int) -> str:
    """The folder of a substring stage (of :data:`SEEDED`) for ``seed``; also
    the name of the ``hash`` stage's marker (:func:`stage`)."""
    return f"{folder}{seed}"


def hash_file(seed: int, name: str) -> str:
    """What the ``hash`` stage writes over every chunk (``UNIT_HASHES``,
    ``DOC_UNITS``)."""
    return f"{seeded(HASH, seed)}/{name}"


def hash_chunk(seed: int, key: str) -> str:
    """The ``hash`` unit of the chunk ``key``."""
    return f"{seeded(HASH, seed)}/{key}"


def vocab_part(seed: int, parts: int, p: int) -> str:
    """The ``vocab`` unit of hash range ``p`` of ``parts`` (a marker only)."""
    return f"{seeded(VOCAB, seed)}/{parts}/p{p:05d}"


def windows_part(seed: int, parts: int, p: int) -> str:
    """The ``windows`` unit of hash range ``p`` of ``parts``."""
    return f"{seeded(WINDOWS, seed)}/{parts}/p{p:05d}"


def cut_chunk(seed: int, parts: int, key: str) -> str:
    """The ``cut`` unit of the chunk ``key``, after ``parts`` window ranges."""
    return f"{seeded(CUT, seed)}/{parts}/{key}"
