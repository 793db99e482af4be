"""Recall benchmark: agentd's index beside tantivy with its own English analyzer, side by
side in one run on the same corpus. Prints figures; asserts nothing.

    python tests/bench/recall_bench.py [--sizes 200000,1000000] [--dir /tmp/recall-bench]

For each size (messages of ``recall_corpus``'s stream), both indexes are built on disk
under ``--dir`` and then searched with every query of ``recall_corpus.query_sets``
(limit 10), one after the other, each query ``--repeat`` times:

- agentd: ``AgentIndex`` (``shared/recall``): the build reads the corpus's documents
  (prepared, analyzed, committed every 50,000 and at the end, merges waited for), a
  search is ``AgentIndex.search`` (parse, tantivy's searches, the rerank with the
  neighbours' loans, the echoes, the question's demotion; hits' numbers read from fast
  fields, no text);
- tantivy: one text field with tantivy's ``en_stem`` analyzer (positions, not stored),
  the same conversation, role and date fields, built with the same writer heap; a search
  is its query parser's query (quotes make phrases) with the same filters, top 10. Its
  CJK figures are not agentd's work: ``en_stem`` keeps a CJK run as one token, so a CJK
  term finds only runs equal to it (about 5% of the messages holding it as a substring),
  one short posting list, where agentd searches the substring in every run.
- tantivy on agentd's fields (:class:`OwnFields`, queries only): agentd's own index
  searched with the same terms, phrases and filters as one plain BM25 query, top 10,
  nothing else: the difference to agentd's figure is recall's rules (echoes, neighbours'
  loans, the question, tie-breaks, the hits' places), not the matching.

Measured too: the size of each index on disk against the raw text (UTF-8 bytes of every
message), appends (a turn of four messages added, then committed, as the daemon does),
and at the largest size the start-up of a persisted index (``recall_startup.py``: the
recall process spawned to its first answer, ``agentd serve`` spawned to its first search
answered over its socket), unless ``--skip-startup``.

The machine is shared while it runs (other engineers' tests, two cores): compare figures
within one run rather than with another run's, and note the load (printed at each step).
Beside each query type's p50 are the p50 of each query's best run of its ``--repeat``
and the p50 of the searching thread's CPU time, which a loaded machine disturbs least.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tantivy
from xxhash import xxh3_64_intdigest

if __package__ is None:  # run as a script: the repository root is not on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from shared.recall.documents import Document
from shared.recall.index import BUILD_HEAP, AgentIndex
from shared.recall.queries import combine, filters, phrase_clauses, term_clauses
from shared.recall.ranking import SearchRequest
from shared.recall.schema import ROLE_CODE, open_index
from shared.recall.text import parse_query
from tests.bench.recall_corpus import Corpus, describe, needles, query_sets

QUERY_CORPUS = 100_000
"""Phrases and date ranges are sampled from the first this many messages."""
TURN = 4
"""Messages per append (a user message, a tool call, its result, the reply)."""


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(p * len(ordered)) - 1)]


def mb(size: float) -> str:
    return f"{size / 1e6:,.0f} MB"


def disk_bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())


# --- tantivy as it comes ---------------------------------------------------------------------


class Tantivy:
    """tantivy's own English analyzer (``en_stem``) on one text field, persisted."""

    def __init__(self, directory: Path) -> None:
        builder = tantivy.SchemaBuilder()
        builder.add_text_field("text", tokenizer_name="en_stem")
        builder.add_unsigned_field("conv", indexed=True, fast=True)
        builder.add_unsigned_field("role", indexed=True, fast=True)
        builder.add_float_field("created", fast=True)
        self.schema = builder.build()
        directory.mkdir(parents=True, exist_ok=True)
        self.index = tantivy.Index(self.schema, path=str(directory))

    def build(self, documents: list[Document]) -> None:
        writer = self.index.writer(heap_size=BUILD_HEAP, num_threads=1)
        for document in documents:
            indexed = tantivy.Document()
            indexed.add_text("text", document.text)
            indexed.add_unsigned("conv", _hash(document.conversation_id))
            indexed.add_unsigned("role", ROLE_CODE[document.role])
            indexed.add_float("created", document.created_at)
            writer.add_document(indexed)
        writer.commit()
        writer.wait_merging_threads()

    def open(self) -> None:
        self.index.reload()
        self.searcher = self.index.searcher()

    def search(self, request: SearchRequest) -> list[Any]:
        query, _ = self.index.parse_query_lenient(request.query, ["text"])
        scope = [query]
        if request.conversation_id is not None:
            conversation = _hash(request.conversation_id)
            scope.append(tantivy.Query.term_query(self.schema, "conv", conversation))
        if request.role is not None:
            scope.append(tantivy.Query.term_query(self.schema, "role", ROLE_CODE[request.role]))
        if request.since is not None or request.until is not None:
            since = request.since.timestamp() if request.since else -1e300
            until = request.until.timestamp() if request.until else 1e300
            scope.append(
                tantivy.Query.range_query(
                    self.schema, "created", tantivy.FieldType.Float, since, until
                )
            )
        if len(scope) > 1:
            query = tantivy.Query.boolean_query([(tantivy.Occur.Must, q) for q in scope])
        return list(self.searcher.search(query, request.limit, count=False).hits)


class OwnFields:
    """tantivy alone on agentd's own index and fields: the query parsed and its terms,
    phrases and filters searched as one BM25 query, top ``limit``, and nothing else (no
    echoes, no neighbours' loans, no question, no tie-break, no hit's place read). What
    agentd's search costs beyond this is recall's rules, not the engine's matching."""

    def __init__(self, directory: Path) -> None:
        self.index = open_index(directory)
        self.schema = self.index.schema
        self.searcher = self.index.searcher()

    def search(self, request: SearchRequest) -> list[Any]:
        query = parse_query(request.query)
        conversation = None if request.conversation_id is None else _hash(request.conversation_id)
        scope = filters(self.schema, request, conversation)
        terms = term_clauses(self.schema, query, "")
        phrases = phrase_clauses(self.schema, query, "")
        if not (terms or phrases):
            return []
        combined = combine(terms, phrases, scope)
        return list(self.searcher.search(combined, request.limit, count=False).hits)


def _hash(conversation_id: str) -> int:
    return xxh3_64_intdigest(conversation_id.encode())


# --- measuring -------------------------------------------------------------------------------


Engine = Callable[[SearchRequest], Any]


def time_queries(
    engines: dict[str, Engine], sets: dict[str, list[SearchRequest]], repeat: int
) -> dict[str, dict[str, list[float]]]:
    """Milliseconds per query, per engine and query type, and under ``<engine> cpu`` the
    searching thread's CPU time (tantivy searches in the calling thread); the engines
    alternate query by query, so the machine's load weighs on both alike."""
    times: dict[str, dict[str, list[float]]] = {
        name + cpu: {} for name in engines for cpu in ("", " cpu")
    }
    for engine in engines.values():
        engine(SearchRequest("warm up"))
    for kind, requests in sets.items():
        for name in times:
            times[name][kind] = []
        for request in requests:
            for _ in range(repeat):
                for name, engine in engines.items():
                    started, cpu = time.perf_counter(), time.thread_time()
                    engine(request)
                    times[name][kind].append((time.perf_counter() - started) * 1000)
                    times[name + " cpu"][kind].append((time.thread_time() - cpu) * 1000)
    return times


def best_of(samples: list[float], repeat: int) -> list[float]:
    """Each query's fastest run of its ``repeat``: what it costs when the machine lets
    it run (a loaded machine stretches a query that outlasts a time slice several fold,
    and so the slower engine's queries more)."""
    return [min(samples[n : n + repeat]) for n in range(0, len(samples), repeat)]


def print_queries(size: int, times: dict[str, dict[str, list[float]]], repeat: int) -> None:
    print(f"\nquery latency at {size:,} messages (limit 10; ms; {load()}):")
    columns = (
        f"{'agentd p50':>10} {'p95':>7} {'tantivy p50':>11} {'p95':>7} {'×':>6}"
        f" {'best-of p50: agentd':>20} {'tantivy':>8} {'×':>6}"
        f" {'CPU p50: agentd':>16} {'tantivy':>8} {'×':>6}"
    )
    print(f"  {'query type':<22} {columns}")
    every: dict[str, list[float]] = {name: [] for name in times}
    for kind in [*times["agentd"], "all"]:
        if kind != "all":
            for name in times:
                every[name] += times[name][kind]
        a_all, b_all, a_cpu, b_cpu = (
            every[name] if kind == "all" else times[name][kind]
            for name in ("agentd", "tantivy", "agentd cpu", "tantivy cpu")
        )
        a, b = percentile(a_all, 0.5), percentile(b_all, 0.5)
        a_best = percentile(best_of(a_all, repeat), 0.5)
        b_best = percentile(best_of(b_all, repeat), 0.5)
        a_c, b_c = percentile(a_cpu, 0.5), percentile(b_cpu, 0.5)
        print(
            f"  {kind:<22} {a:>10.2f} {percentile(a_all, 0.95):>7.2f}"
            f" {b:>11.2f} {percentile(b_all, 0.95):>7.2f} {a / b:>6.2f}"
            f" {a_best:>20.2f} {b_best:>8.2f} {a_best / b_best:>6.2f}"
            f" {a_c:>16.2f} {b_c:>8.2f} {a_c / b_c:>6.2f}"
        )


def print_rules_cost(times: dict[str, dict[str, list[float]]]) -> None:
    """agentd's search against tantivy's search of the same terms in the same index
    (:class:`OwnFields`): the cost of recall's rules, by the searching thread's CPU."""
    print("  agentd's rules over tantivy searching agentd's fields (CPU p50 ms):")
    every: dict[str, list[float]] = {"agentd cpu": [], "fields cpu": []}
    for kind in [*times["agentd cpu"], "all"]:
        if kind != "all":
            for name in every:
                every[name] += times[name][kind]
        ours, bare = (
            percentile(every[name] if kind == "all" else times[name][kind], 0.5)
            for name in ("agentd cpu", "fields cpu")
        )
        print(f"    {kind:<22} {ours:>7.2f} {bare:>7.2f} {ours / bare:>6.2f}×")


def slowest(
    times: dict[str, list[float]], sets: dict[str, list[SearchRequest]], repeat: int
) -> None:
    rows = []
    for kind, samples in times.items():
        for n, request in enumerate(sets[kind]):
            rows.append((statistics.median(samples[n * repeat : (n + 1) * repeat]), kind, request))
    print("  agentd's slowest queries (median ms):")
    for ms, kind, request in sorted(rows, key=lambda row: row[0], reverse=True)[:6]:
        print(f"    {ms:8.2f}  [{kind}] {describe(request)}")


def time_appends(directory: Path, documents: list[Document]) -> dict[str, float]:
    """Turns of :data:`TURN` messages added to the built index, each then committed."""
    index = AgentIndex(directory)
    adds: list[float] = []
    commits: list[float] = []
    for start in range(0, len(documents), TURN):
        began = time.perf_counter()
        for document in documents[start : start + TURN]:
            index.add(document)
        added = time.perf_counter()
        index.commit()
        adds.append((added - began) * 1e6 / TURN)
        commits.append((time.perf_counter() - added) * 1000)
    index.close()
    return {
        "add_us": statistics.fmean(adds),
        "commit_p50_ms": percentile(commits, 0.5),
        "commit_p95_ms": percentile(commits, 0.95),
    }


def measure(
    size: int,
    documents: list[Document],
    sets: dict[str, list[SearchRequest]],
    directory: Path,
    repeat: int,
) -> dict[str, Any]:
    chosen = documents[:size]
    raw = sum(len(d.text.encode()) for d in chosen)
    print(f"\n=== {size:,} messages, raw text {mb(raw)} ({load()})", flush=True)
    figures: dict[str, Any] = {"raw": raw}
    ours_dir, theirs_dir = directory / f"agentd-{size}", directory / f"tantivy-{size}"
    for path in (ours_dir, theirs_dir):
        shutil.rmtree(path, ignore_errors=True)
    theirs = Tantivy(theirs_dir)
    for name, build in (
        ("agentd", lambda: _build_ours(ours_dir, chosen)),
        ("tantivy", lambda: theirs.build(chosen)),
    ):
        started = time.perf_counter()
        build()
        seconds = time.perf_counter() - started
        on_disk = disk_bytes(ours_dir if name == "agentd" else theirs_dir)
        figures[name] = {"build_s": seconds, "bytes": on_disk}
        print(
            f"  {name} build: {seconds:.1f} s ({size / seconds:,.0f} msg/s); on disk"
            f" {mb(on_disk)} = {on_disk / raw:.2f}× the raw text ({load()})",
            flush=True,
        )
    ours = AgentIndex(ours_dir)
    ours.know(sorted({d.conversation_id for d in chosen}))
    theirs.open()
    fields = OwnFields(ours_dir)
    engines = {"agentd": ours.search, "tantivy": theirs.search, "fields": fields.search}
    times = time_queries(engines, sets, repeat)
    ours.close()
    print_queries(size, times, repeat)
    print_rules_cost(times)
    slowest(times["agentd"], sets, repeat)
    figures["times"] = times
    return figures


def _build_ours(directory: Path, documents: list[Document]) -> None:
    index = AgentIndex(directory)
    index.build(documents)
    index.close()


def summary(sizes: list[int], results: dict[int, dict[str, Any]]) -> None:
    print("\n| figure | agentd | tantivy (en_stem) |\n|---|---|---|")
    for size in sizes:
        figures = results[size]
        times = figures["times"]
        flat = {name: [ms for samples in times[name].values() for ms in samples] for name in times}
        cells = [
            f"{percentile(flat[name], 0.5):.2f} / {percentile(flat[name], 0.95):.2f} ms"
            for name in ("agentd", "tantivy")
        ]
        print(f"| query p50 / p95, every query, {size:,} | {cells[0]} | {cells[1]} |")
        slowest_kind = max(times["agentd"], key=lambda k: percentile(times["agentd"][k], 0.5))
        print(
            f"| slowest query type p50, {size:,} | {slowest_kind}:"
            f" {percentile(times['agentd'][slowest_kind], 0.5):.2f} ms |"
            f" {percentile(times['tantivy'][slowest_kind], 0.5):.2f} ms |"
        )
        builds = [
            f"{size / figures[name]['build_s']:,.0f} msg/s,"
            f" {figures[name]['bytes'] / figures['raw']:.2f}×"
            for name in ("agentd", "tantivy")
        ]
        print(f"| build, size on disk (× raw text), {size:,} | {builds[0]} | {builds[1]} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="200000,1000000")
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5, help="runs of each query")
    parser.add_argument("--appends", type=int, default=2_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dir", default="/tmp/recall-bench", help="where the indexes go")
    parser.add_argument("--skip-startup", action="store_true")
    parser.add_argument("--startup-only", action="store_true")
    args = parser.parse_args()
    began = time.perf_counter()
    sizes = sorted(int(size) for size in args.sizes.split(","))
    largest = sizes[-1]
    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    corpus = Corpus(args.seed, args.conversations, needles(min(QUERY_CORPUS, largest), largest))
    documents = list(itertools.islice(corpus.documents(), largest + args.appends))
    sets = query_sets(corpus, documents[:QUERY_CORPUS])
    print(
        f"corpus: {largest:,} messages in {args.conversations} conversations (seed"
        f" {args.seed}); {sum(len(r) for r in sets.values())} queries in {len(sets)} types"
    )
    if not args.startup_only:
        results = {size: measure(size, documents, sets, directory, args.repeat) for size in sizes}
        appended = time_appends(directory / f"agentd-{largest}", documents[largest:])
        print(
            f"\nappends to the {largest:,} index, turns of {TURN} each committed: add"
            f" {appended['add_us']:.0f} µs a message, commit p50 {appended['commit_p50_ms']:.1f}"
            f" / p95 {appended['commit_p95_ms']:.1f} ms ({load()})"
        )
        summary(sizes, results)
    if not args.skip_startup:
        from tests.bench import recall_startup  # the daemon's modules: only if wanted

        recall_startup.measure(directory / "startup", documents[:largest], sets)
    print(f"\ntotal run time: {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
