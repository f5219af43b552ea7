"""A sweep's results: one Parquet row per point, written as the points finish, so a sweep that
stops (Ctrl+C, a killed job, a lost node) resumes where it stopped.

While a sweep runs, each finished batch of rows is a small Parquet file in ``OUT.parts/``
(written beside, then renamed: a file there is whole or absent). When every point is done the
parts and any earlier ``OUT`` are merged into ``OUT``, one row per point in point order, and the
folder is removed. Every file carries the grid's fingerprint (:attr:`Grid.fingerprint`) in its
schema metadata: results of another grid or another trainplan version are never mixed in.
pyarrow writes and reads the files; pandas holds the table.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from trainplan.interface.sweep.grid import Grid
from trainplan.interface.sweep.points import columns
from trainplan.model.errors import InputError

__all__ = ["ResultsStore", "load_results", "frame_of", "records", "results_meta", "META_KEY"]

META_KEY = b"trainplan.sweep"
"""The schema metadata key holding the sweep's description (JSON: fingerprint, grid, command,
objective, points, what_ifs, notes — :attr:`interface.sweep.grid.Grid.notes` — version)."""


def _pa() -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError("sweep: pyarrow is not installed; pip install -e '.[sweep]'") from None
    return pa, pq


def _schema(grid: Grid) -> Any:
    pa, _ = _pa()
    kinds = {"int": pa.int64(), "float": pa.float64(), "str": pa.string()}
    meta = {
        "fingerprint": grid.fingerprint,
        "grid": grid.source,
        "description": grid.description,
        "command": grid.command,
        "objective": str(grid.base.get("objective") or "step-time"),
        "tokens": grid.base.get("tokens"),
        "points": len(grid.points),
        "what_ifs": list(grid.what_ifs),
        "notes": list(grid.notes),
    }
    fields = [pa.field(name, kinds[kind]) for name, kind in columns(grid)]
    return pa.schema(fields, metadata={META_KEY: json.dumps(meta, default=str).encode()})


def results_meta(path: str | Path) -> dict[str, Any]:
    """The sweep description a results file carries (see :data:`META_KEY`).

    Raises
    ------
    InputError
        A file that is not a sweep's Parquet results.
    """
    _, pq = _pa()
    try:
        meta = pq.read_schema(path).metadata or {}
    except (OSError, ValueError) as err:
        raise InputError(f"results: {str(path)!r} is not a Parquet file ({err})") from None
    if META_KEY not in meta:
        raise InputError(f"results: {str(path)!r} is not the results of trainplan sweep")
    return dict(json.loads(meta[META_KEY]))


class ResultsStore:
    """The results of one grid at ``path``: the points already done, and the rows as they come.

    Raises
    ------
    InputError
        ``path`` (or its parts) written by another grid or trainplan version, unless
        ``restart`` (then they are removed); a path that cannot be written.
    """

    def __init__(self, path: str | Path, grid: Grid, restart: bool = False) -> None:
        self.path = Path(path)
        self.parts = self.path.with_name(self.path.name + ".parts")
        self.grid = grid
        self.schema = _schema(grid)
        if restart:
            self.path.unlink(missing_ok=True)
            shutil.rmtree(self.parts, ignore_errors=True)
        self.done: set[int] = set()
        for file in self._files():
            self._check(file)
            self.done.update(self._points(file))

    def _files(self) -> list[Path]:
        files = [self.path] if self.path.exists() else []
        if self.parts.is_dir():
            for stale in self.parts.glob("*.tmp"):  # a batch being written when it stopped
                stale.unlink()
            files += sorted(self.parts.glob("part-*.parquet"))
        return files

    def _check(self, file: Path) -> None:
        found = results_meta(file).get("fingerprint")
        if found != self.grid.fingerprint:
            raise InputError(
                f"out: {str(file)!r} holds results of another grid or trainplan version; give "
                "another --out, or --restart to replace them"
            )

    def _points(self, file: Path) -> list[int]:
        _, pq = _pa()
        return [int(i) for i in pq.read_table(file, columns=["point"]).column("point").to_pylist()]

    def append(self, rows: list[dict[str, Any]]) -> None:
        """Write one batch of rows as a part file (whole or absent, never half)."""
        if not rows:
            return
        pa, pq = _pa()
        self.parts.mkdir(exist_ok=True)
        name = f"part-{min(r['point'] for r in rows):09d}-{uuid.uuid4().hex[:8]}.parquet"
        tmp = self.parts / (name + ".tmp")
        pq.write_table(pa.Table.from_pylist(rows, schema=self.schema), tmp)
        os.replace(tmp, self.parts / name)
        self.done.update(r["point"] for r in rows)

    def finish(self) -> Any:
        """Merge every row into ``path`` (point order, one row a point) and remove the parts;
        the table as a pandas DataFrame."""
        pa, pq = _pa()
        files = self._files()
        if not files:
            table = self.schema.empty_table()
        else:
            table = pa.concat_tables([pq.read_table(f).cast(self.schema) for f in files])
        frame = _frame(table)
        if self.parts.is_dir() or not self.path.exists():
            tmp = self.path.with_name(self.path.name + ".tmp")
            pq.write_table(
                pa.Table.from_pandas(frame, schema=self.schema, preserve_index=False), tmp
            )
            os.replace(tmp, self.path)
            shutil.rmtree(self.parts, ignore_errors=True)
        return frame


def _frame(table: Any) -> Any:
    """A results table as pandas, one row a point in point order; whole-number columns stay whole
    (pandas' nullable Int64: an infeasible point's layout is <NA>, not NaN turning 8 into 8.0)."""
    import pandas as pd
    import pyarrow as pa

    frame = table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
    return frame.drop_duplicates("point").sort_values("point").reset_index(drop=True)


def frame_of(grid: Grid, rows: list[dict[str, Any]]) -> Any:
    """Rows of ``grid`` (:func:`interface.sweep.points.run_point`'s dicts, or their JSON) as the
    DataFrame a results file holds: the same columns, kinds and order."""
    pa, _ = _pa()
    return _frame(pa.Table.from_pylist(rows, schema=_schema(grid)))


def load_results(path: str | Path) -> Any:
    """A results file as a pandas DataFrame (a sweep still running or stopped: its parts too),
    with its description in ``frame.attrs["sweep"]``.

    Raises
    ------
    InputError
        No such file, or not a sweep's results.
    """
    pa, pq = _pa()
    p = Path(path)
    parts = p.with_name(p.name + ".parts")
    files = ([p] if p.exists() else []) + (
        sorted(parts.glob("part-*.parquet")) if parts.is_dir() else []
    )
    if not files:
        raise InputError(
            f"results: {str(path)!r} does not exist (trainplan sweep GRID --out writes it)"
        )
    meta = results_meta(files[0])
    for f in files[1:]:
        if results_meta(f).get("fingerprint") != meta.get("fingerprint"):
            raise InputError(f"results: {str(f)!r} belongs to another sweep than {str(files[0])!r}")
    table = pa.concat_tables([pq.read_table(f) for f in files], promote_options="default")
    frame = _frame(table)
    frame.attrs["sweep"] = meta
    return frame


def records(frame: Any) -> list[dict[str, Any]]:
    """A results table's rows as JSON takes them: missing values None, numbers plain Python."""
    import pandas as pd

    out = []
    for row in frame.to_dict("records"):
        clean = {}
        for k, v in row.items():
            if pd.isna(v):
                v = None
            elif hasattr(v, "item"):
                v = v.item()
            clean[k] = v
        out.append(clean)
    return out
