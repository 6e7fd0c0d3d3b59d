"""The loader's duplicate rule, kept as a rank is read: one call, one row, the first
occurrence in file order winning (a batch written twice, files merged)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


class Seen:
    """The calls a rank has written so far, for the loader's duplicate rule (first
    occurrence in file order wins). Per call key (group, op, peer), the sequence
    numbers seen, as sorted disjoint intervals: a rank's numbers count up, so each key
    usually holds one interval, whatever the length of the run."""

    def __init__(self) -> None:
        self._lo: dict[tuple[Any, ...], np.ndarray] = {}
        self._hi: dict[tuple[Any, ...], np.ndarray] = {}

    def first(self, table: pa.Table) -> np.ndarray:
        """Mask of the rows of ``table`` whose call was not seen before; remembers them."""
        n = table.num_rows
        keep = np.ones(n, dtype=bool)
        if n == 0:
            return keep
        seq = table.column("seq").to_numpy()
        bounds = [pc.min_max(table.column(c)) for c in ("group", "op", "peer")]
        if all(b["min"] == b["max"] for b in bounds):  # the usual case: one kind of call
            key = (bounds[0]["min"].as_py(), bounds[1]["min"].as_py(), str(bounds[2]["min"]))
            parts: list[tuple[tuple[Any, ...], Any]] = [(key, slice(None))]
        else:
            code = pc.dictionary_encode(
                pc.binary_join_element_wise(
                    table.column("group"),
                    table.column("op"),
                    pc.cast(table.column("peer"), pa.string()),
                    "\x00",
                )
            ).combine_chunks()
            idx = code.indices.to_numpy()
            parts = [
                (tuple(str(v).split("\x00")), np.flatnonzero(idx == i))
                for i, v in enumerate(code.dictionary.to_pylist())
            ]
        for key, rows in parts:
            s = seq[rows]
            ok = self._first(key, s)
            if not ok.all():
                sub = keep[rows]
                sub &= ok
                keep[rows] = sub
        return keep

    def _first(self, key: tuple[Any, ...], s: np.ndarray) -> np.ndarray:
        lo, hi = self._lo.get(key), self._hi.get(key)
        increasing = len(s) < 2 or bool(np.all(s[1:] > s[:-1]))
        if increasing and (hi is None or s[0] > hi[-1]):
            ok = np.ones(len(s), dtype=bool)
        else:
            ok = np.zeros(len(s), dtype=bool)
            _, first = np.unique(s, return_index=True)
            ok[first] = True
            if lo is not None and hi is not None:
                at = np.searchsorted(lo, s, side="right") - 1
                ok &= ~((at >= 0) & (s <= hi[np.maximum(at, 0)]))
        self._remember(key, np.unique(s[ok]) if not increasing else s[ok])
        return ok

    def extend(self, key: tuple[Any, ...], first: int, last: int) -> bool:
        """Remember the numbers ``first..last`` (all new) of ``key`` if they go on where
        the key's numbers stopped (or it has none): what :meth:`first` would do for them.
        False, changing nothing, when they do not (then call :meth:`first`)."""
        hi = self._hi.get(key)
        if hi is None:
            self._lo[key] = np.array([first], dtype=np.int64)
            self._hi[key] = np.array([last], dtype=np.int64)
            return True
        if first == hi[-1] + 1:
            hi[-1] = last
            return True
        return False

    def _remember(self, key: tuple[Any, ...], new: np.ndarray) -> None:
        if len(new) == 0:
            return
        lo, hi = self._lo.get(key), self._hi.get(key)
        contiguous = bool(new[-1] - new[0] == len(new) - 1)
        if lo is not None and hi is not None and contiguous and new[0] == hi[-1] + 1:
            hi[-1] = new[-1]  # the usual case: the run goes on
            return
        cut = np.flatnonzero(np.diff(new) != 1) + 1
        new_lo, new_hi = new[np.r_[0, cut]], new[np.r_[cut - 1, len(new) - 1]]
        if lo is not None and hi is not None:
            new_lo, new_hi = np.concatenate((lo, new_lo)), np.concatenate((hi, new_hi))
            order = np.argsort(new_lo, kind="stable")
            new_lo, new_hi = new_lo[order], new_hi[order]
            reach = np.maximum.accumulate(new_hi)
            start = np.r_[True, new_lo[1:] > reach[:-1] + 1]
            group = np.cumsum(start) - 1
            merged_hi = np.full(int(group[-1]) + 1, np.iinfo(np.int64).min, dtype=np.int64)
            np.maximum.at(merged_hi, group, new_hi)
            new_lo, new_hi = new_lo[start], merged_hi
        self._lo[key], self._hi[key] = new_lo.astype(np.int64), new_hi.astype(np.int64)
