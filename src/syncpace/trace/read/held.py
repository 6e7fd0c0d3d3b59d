"""Validated rows held between being read and being analysed, and a window's table
gathered from them.

The sweep reads each rank a batch or more past the window it serves; the rows it has
validated wait in :class:`Held` groups (columns as numpy arrays, names as codes, and the
order that puts the rows in window order), and each window gathers its rows from every
group straight into its own columns (:func:`window_table`): a row is copied once
between being validated and being analysed.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


class Held:
    """A group of validated rows not all analysed yet: its columns as numpy arrays (the
    names as codes into :attr:`names`), and the window order of its rows: ``order``
    (None when the rows are in it already), ``windows`` (ascending) and ``bounds``,
    where each window's rows start in that order (and the end); ``top`` its largest
    step. The rows from :attr:`start` on, in window order, are still to come.

    The rows are not moved into window order: a window gathers its rows from each
    group straight into its own columns (:func:`window_table`), so a row is copied
    once between being validated and being analysed, not three times (into window
    order, then a slice of it joined into the window, 18 % of the 100M case)."""

    def __init__(
        self,
        columns: dict[str, np.ndarray],
        names: dict[str, list[str]],
        order: np.ndarray | None,
        windows: np.ndarray,
        bounds: np.ndarray,
        top: int,
    ) -> None:
        self.columns, self.names, self.order = columns, names, order
        self.windows, self._bounds, self.top = windows, bounds, top
        self.start = 0

    @classmethod
    def of(cls, table: pa.Table, window: np.ndarray, top: int) -> Held:
        """``table`` (validated rows: no nulls; names dictionary-encoded), whose rows are
        of windows ``window``."""
        columns: dict[str, np.ndarray] = {}
        names: dict[str, list[str]] = {}
        for name in table.column_names:
            column = table.column(name)
            chunk = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
            if pa.types.is_dictionary(chunk.type):
                names[name] = chunk.dictionary.to_pylist()
                chunk = chunk.indices
            columns[name] = chunk.to_numpy()
        order, windows, bounds = _window_order(window)
        return cls(columns, names, order, windows, bounds, top)

    @property
    def num_rows(self) -> int:
        return int(self._bounds[-1])

    def rows_of(self, first: int, last: int) -> tuple[int, int]:
        """The rows of windows ``first..last`` (positions in window order)."""
        i, j = np.searchsorted(self.windows, (first, last + 1))
        return int(self._bounds[i]), int(self._bounds[j])

    def rows(self, a: int, b: int) -> np.ndarray | slice:
        """Where positions ``a..b`` of the window order are among the held rows."""
        return slice(a, b) if self.order is None else self.order[a:b]

    def next_step(self) -> int:
        """The step of the first row still to come."""
        at = self.start if self.order is None else int(self.order[self.start])
        return int(self.columns["step"][at])

    def rest(self) -> Held:
        """Without its analysed rows once they are most of it: copying the rest then
        costs at most as much again, and memory stays about the rows still to come,
        not the batches they came in."""
        n = self.num_rows
        if 4 * self.start < 3 * n:
            return self
        rows = self.rows(self.start, n)
        kept = {name: values[rows] for name, values in self.columns.items()}
        if isinstance(rows, slice):  # a view would hold the whole group
            kept = {name: values.copy() for name, values in kept.items()}
        later = self._bounds[1:] > self.start  # the windows with rows still to come
        bounds = np.append(np.maximum(self._bounds[:-1][later], self.start), n)
        return Held(kept, self.names, None, self.windows[later], bounds - self.start, self.top)


def _window_order(window: np.ndarray) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """The rows in window order (None when they are), the windows present (ascending)
    and where each starts in that order (and the end). A stable order keeps rank and
    file order within a window; a group spans a few windows, so their numbers from the
    smallest fit 16 bits, which numpy sorts by radix (a pass per byte)."""
    n = len(window)
    if n == 0:
        return None, np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
    low = int(window.min())
    span = int(window.max()) - low + 1
    if n > 1 and not (window[1:] < window[:-1]).any():
        order = None
    elif span <= 1 << 16:
        order = np.argsort((window - low).astype(np.uint16), kind="stable")
    else:
        order = np.argsort(window, kind="stable")
    if span <= 4 * n + 1024:
        counts = np.bincount(window - low, minlength=span)
        present = np.flatnonzero(counts)
        windows = present + low
        bounds = np.r_[0, np.cumsum(counts[present])]
    else:
        windows, counts = np.unique(window, return_counts=True)
        bounds = np.r_[0, np.cumsum(counts)]
    return order, windows.astype(np.int64), bounds.astype(np.int64)


def window_table(pieces: list[tuple[Held, int, int]]) -> pa.Table:
    """One window's table from its pieces, rows ``a..b`` (in window order) of held
    groups: each column gathered from the pieces straight into one array, the names
    kept as codes under one dictionary (the pieces' merged, values in order of first
    appearance), as the analysis reads them. In rank order, file order within a rank:
    each piece is; the pieces too unless two groups read in different windows overlap
    in ranks, and then a stable sort by rank puts a rank's earlier group first."""
    total = sum(b - a for _, a, b in pieces)
    first = pieces[0][0]
    columns: dict[str, np.ndarray] = {}
    dictionaries: dict[str, list[str]] = {}
    for name, values in first.columns.items():
        if name in first.names:
            columns[name], dictionaries[name] = _gathered_codes(name, pieces, total)
            continue
        out = np.empty(total, dtype=values.dtype)
        at = 0
        for h, a, b in pieces:
            rows = h.rows(a, b)
            if isinstance(rows, slice):
                out[at : at + b - a] = h.columns[name][rows]
            else:
                # "clip" (the rows are in range): numpy buffers a checked take into out
                np.take(h.columns[name], rows, out=out[at : at + b - a], mode="clip")
            at += b - a
        columns[name] = out
    rank = columns["rank"]
    edges = np.cumsum([b - a for _, a, b in pieces])[:-1]
    if len(edges) and (rank[edges - 1] > rank[edges]).any():
        order = np.argsort(rank, kind="stable")
        columns = {name: values[order] for name, values in columns.items()}
    arrays = [
        pa.DictionaryArray.from_arrays(pa.array(values), pa.array(dictionaries[name], pa.string()))
        if name in dictionaries
        else pa.array(values)
        for name, values in columns.items()
    ]
    return pa.Table.from_arrays(arrays, names=list(columns))


def _gathered_codes(
    name: str, pieces: list[tuple[Held, int, int]], total: int
) -> tuple[np.ndarray, list[str]]:
    """A name column's codes of the pieces under one dictionary, and that dictionary.
    Pieces with the same dictionary (the usual case: the same few names all along)
    have their codes gathered as they are; others through a map of their codes."""
    dictionaries = [h.names[name] for h, _, _ in pieces]
    merged: dict[str, int] = {}
    maps = []
    for dictionary in dictionaries:
        maps.append(np.array([merged.setdefault(v, len(merged)) for v in dictionary], np.int32))
    kind = np.int8 if len(merged) <= 127 else np.int32
    out = np.empty(total, dtype=kind)
    at = 0
    for (h, a, b), remap in zip(pieces, maps, strict=True):
        codes = h.columns[name][h.rows(a, b)]
        identity = len(remap) == 0 or bool((remap == np.arange(len(remap))).all())
        out[at : at + b - a] = codes if identity else remap[codes]
        at += b - a
    return out, list(merged)
