"""Run outputs: results/<experiment>/<run>/{config.json, metrics.jsonl, summary.json, plots/}.

  config.json    the resolved config (atomic write).
  metrics.jsonl  one JSON object per logged step, {"step": s, "<metric>": value, ...},
                 appended and flushed as it goes. Non-finite floats are written as null
                 (strict JSON). On resume from step S the lines with step > S are dropped
                 (atomic rewrite), so a resumed run's file equals an uninterrupted one's.
  summary.json   final numbers (atomic write).
  plots/<key>.png  learning curves (matplotlib, Agg, atomic write).

A tqdm bar over training steps shows chosen metrics; it is off when stderr is not a
terminal (progress=None) or when progress=False. TensorBoard event files are written
only when asked and a writer library (tensorboardX, or torch's with tensorboard) is
importable; otherwise a warning, and JSONL stays the record.

Every file write here is atomic: a temporary file in the same directory, then os.replace.
In a run of several processes (asct_jax.infra.distributed) only process 0 writes: the
others keep the same records in memory (their summaries are computed, not written).
"""
from __future__ import annotations

import json
import math
import os
import tempfile
import warnings
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

import numpy as np
from matplotlib.figure import Figure
from tqdm.auto import tqdm

from asct_jax.infra.config_cli import config_to_dict

CONFIG_FILE, METRICS_FILE, SUMMARY_FILE, PLOTS_DIR = (
    "config.json", "metrics.jsonl", "summary.json", "plots")


# ----------------------------------------------------------------------------- atomic I/O

def _atomic_write(path: str, write_fn, mode: str = "w") -> str:
    """Calls write_fn(file) on a temp file beside `path`, then renames it onto `path`."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".",
                               suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as f:
            write_fn(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path


def atomic_write_text(path: str, text: str) -> str:
    """Writes `text` to `path` atomically."""
    return _atomic_write(path, lambda f: f.write(text))


def to_jsonable(value: Any) -> Any:
    """Scalars / arrays / nested containers -> JSON values; NaN and +-inf -> None."""
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (str, bool)) or value is None:
        return value
    arr = np.asarray(value)
    if arr.dtype == object:
        return str(value)
    if arr.ndim:
        return [to_jsonable(v) for v in arr.tolist()]
    item = arr.item()
    if isinstance(item, float) and not math.isfinite(item):
        return None
    return item


def atomic_write_json(path: str, obj: Any) -> str:
    """Writes `obj` as indented, sorted, strict JSON to `path` atomically."""
    text = json.dumps(to_jsonable(obj), indent=2, sort_keys=True, allow_nan=False)
    return atomic_write_text(path, text + "\n")


def atomic_savefig(fig: Figure, path: str, dpi: int = 120) -> str:
    """Saves a matplotlib figure (format from the extension) to `path` atomically."""
    fmt = os.path.splitext(os.fspath(path))[1].lstrip(".") or "png"
    return _atomic_write(path, lambda f: fig.savefig(f, format=fmt, dpi=dpi,
                                                     bbox_inches="tight"), mode="wb")


def read_jsonl(path: str) -> List[Dict[str, Any]]:
    """The JSON objects of a JSONL file; a torn last line (crash mid-write) is skipped."""
    if not os.path.exists(path):
        return []
    records = []
    with open(path) as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def _safe_name(key: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in key)


def plot_curves(records: Sequence[Mapping[str, Any]], key: str, path: str,
                title: Optional[str] = None, smooth: float = 0.0) -> str:
    """One learning curve: records[i][key] against records[i]['step'] (nulls skipped).

    smooth in [0, 1): also draw the exponential moving average
    ema_i = smooth * ema_{i-1} + (1 - smooth) * y_i.
    """
    pts = [(r["step"], r[key]) for r in records if r.get(key) is not None]
    fig = Figure(figsize=(5, 3.2))
    ax = fig.add_subplot()
    if pts:
        x, y = map(np.asarray, zip(*pts))
        ax.plot(x, y, lw=1.0, alpha=0.4 if smooth else 1.0, label=key)
        if smooth:
            ema = np.empty_like(y, dtype=float)
            acc = y[0]
            for i, v in enumerate(y):  # host-side plotting, not a kernel
                acc = smooth * acc + (1 - smooth) * v
                ema[i] = acc
            ax.plot(x, ema, lw=1.5, label=f"{key} (ema {smooth})")
    ax.set_xlabel("step")
    ax.set_ylabel(key)
    ax.set_title(title or key)
    ax.grid(alpha=0.3)
    return atomic_savefig(fig, path)


# ----------------------------------------------------------------------------- logger

def _tensorboard_writer(logdir: str):
    """A SummaryWriter from tensorboardX or torch.utils.tensorboard, or None."""
    try:
        from tensorboardX import SummaryWriter  # type: ignore
    except ImportError:
        try:
            from torch.utils.tensorboard import SummaryWriter  # type: ignore
        except ImportError:
            return None
    return SummaryWriter(logdir)


class RunLogger:
    """Writes one run's config, metrics, summary and plots; shows a progress bar.

    Args:
      results_dir: root of all results (e.g. "results").
      experiment, run: the run lives in results_dir/experiment/run/.
      config: ConfigDict or mapping, saved as config.json.
      total_steps: the bar's total (None: unknown).
      resume_step: None for a fresh run (metrics.jsonl starts empty); S to continue a
        run whose checkpoint holds step S (lines with step > S are dropped).
      progress: True / False, or None to show the bar only on a terminal.
      progress_keys: metrics shown beside the bar.
      tensorboard: also write TensorBoard events to run_dir/tb when a writer exists.
      write: False keeps the records in memory only (no files, no bar); None: write on
        process 0 of a multi-process run only (asct_jax.infra.distributed.is_primary).
    """

    def __init__(self, results_dir: str, experiment: str, run: str, config: Any = None, *,
                 total_steps: Optional[int] = None, resume_step: Optional[int] = None,
                 progress: Optional[bool] = None,
                 progress_keys: Sequence[str] = ("loss", "return"),
                 tensorboard: bool = False, write: Optional[bool] = None):
        if write is None:
            from asct_jax.infra.distributed import is_primary
            write = is_primary()
        self.writes = bool(write)
        self.run_dir = os.path.join(os.fspath(results_dir), experiment, run)
        self.metrics_path = os.path.join(self.run_dir, METRICS_FILE)
        self.progress_keys = tuple(progress_keys)
        if self.writes:
            os.makedirs(self.run_dir, exist_ok=True)
        if config is not None:
            self.write_config(config)
        self._records = self._start_metrics(resume_step)
        self._last_step = self._records[-1]["step"] if self._records else None
        self._file = open(self.metrics_path, "a") if self.writes else None
        self._bar = tqdm(total=total_steps, initial=len({r["step"] for r in self._records if r["step"] > 0}),
                         desc=f"{experiment}/{run}", disable=(not self.writes) or (
                             None if progress is None else not progress),
                         dynamic_ncols=True, leave=True)
        self._tb = None
        if tensorboard and self.writes:
            self._tb = _tensorboard_writer(os.path.join(self.run_dir, "tb"))
            if self._tb is None:
                warnings.warn("tensorboard=True but neither tensorboardX nor torch's "
                              "tensorboard is importable; writing JSONL only")

    def _start_metrics(self, resume_step: Optional[int]) -> List[Dict[str, Any]]:
        """Keeps the records with step <= resume_step (none for a fresh run), atomically."""
        kept = [] if resume_step is None else [
            r for r in read_jsonl(self.metrics_path) if r.get("step", math.inf) <= resume_step]
        if self.writes:
            atomic_write_text(self.metrics_path,
                              "".join(json.dumps(r, allow_nan=False) + "\n" for r in kept))
        return kept

    # -- files -----------------------------------------------------------------------
    def write_config(self, config: Any) -> str:
        """Writes config.json (a ConfigDict or a mapping) atomically."""
        path = os.path.join(self.run_dir, CONFIG_FILE)
        if not self.writes:
            return path
        return atomic_write_json(os.path.join(self.run_dir, CONFIG_FILE),
                                 config_to_dict(config))

    def log(self, step: int, metrics: Mapping[str, Any]) -> Dict[str, Any]:
        """Appends {"step": step, **metrics} to metrics.jsonl (flushed) and moves the bar.

        Metrics are host-fetched scalars (jax / numpy scalars are converted). Steps must
        not go backwards; logging the same step twice adds a second line.
        """
        step = int(step)
        if self._last_step is not None and step < self._last_step:
            raise ValueError(f"step {step} < last logged step {self._last_step}; "
                             "resume with RunLogger(..., resume_step=...)")
        record = {"step": step, **{k: to_jsonable(v) for k, v in metrics.items()}}
        if self._file is not None:
            self._file.write(json.dumps(record, allow_nan=False) + "\n")
            self._file.flush()
        self._records.append(record)
        if step > 0 and (self._last_step is None or step > self._last_step):
            self._bar.update(1)  # step 0 (the initial evaluation) is not a training step
        self._last_step = step
        shown = {k: f"{record[k]:.4g}" for k in self.progress_keys
                 if isinstance(record.get(k), (int, float))}
        if shown:
            self._bar.set_postfix(shown, refresh=False)
        if self._tb is not None:
            for k, v in record.items():
                if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                    self._tb.add_scalar(k, v, step)
        return record

    @property
    def records(self) -> List[Dict[str, Any]]:
        """Every record of this run so far (resumed ones included)."""
        return list(self._records)

    def write_summary(self, summary: Mapping[str, Any]) -> str:
        """Writes summary.json atomically (non-finite numbers become null)."""
        path = os.path.join(self.run_dir, SUMMARY_FILE)
        return atomic_write_json(path, dict(summary)) if self.writes else path

    def plot(self, keys: Optional[Iterable[str]] = None, smooth: float = 0.0) -> List[str]:
        """Writes plots/<key>.png for each key (default: every logged metric)."""
        if keys is None:
            keys = sorted({k for r in self._records for k in r} - {"step"})
        if not self.writes:
            return []
        return [plot_curves(self._records, k,
                            os.path.join(self.run_dir, PLOTS_DIR, _safe_name(k) + ".png"),
                            smooth=smooth) for k in keys]

    def close(self) -> None:
        if self._file is not None and not self._file.closed:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
        self._bar.close()
        if self._tb is not None:
            self._tb.close()

    def __enter__(self) -> "RunLogger":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
