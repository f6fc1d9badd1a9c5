"""Reports: a training run's metrics as plots and a markdown summary, and an evaluation compared with a baseline
(a per-task delta table and a gallery of failed images with the judge's reasons).

Training metrics: ``RUN_DIR/metrics.jsonl``, one flat JSON dict per line (``step``, ``reward/<name>/mean``,
``reward/<name>/std``, ``policy/kl`` or ``policy/approx_kl``, ``policy/clipfrac``, ``vnorm/inflation/<bucket>`` or
``vnorm/norm_ratio/<bucket>``, ...); in-loop evaluations: ``RUN_DIR/eval.jsonl`` (``step``, ``eval/<suite>/overall``,
``eval/<suite>/<task>``, ...).
Evaluations: the folders :func:`imgalign.eval.suite.judge_folder` writes (``summary.json``, ``results.jsonl``, and
the judged images under ``images/``).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

REWARD_MEAN = re.compile(r"^reward/(.+)/mean$")
# samples a reward's NaN/inf scores masked, per step: /masked (a reward of weight 0 masks none), or /nonfinite in
# logs written before /masked was
REWARD_MASKED = re.compile(r"^reward/(.+)/(masked|nonfinite)$")
KL_KEYS = ("policy/kl", "policy/approx_kl", "policy/anchor_kl")
# multi-reward balancing (trainers/balance.py): MARBLE's alpha per reward, each reward's gradient cosine with the
# update, the worst cosine and the running share of updates where it was negative (rewards.diagnose_cosines)
BALANCE_PREFIXES = ("balance/alpha/", "balance/grad_cos/")
BALANCE_KEYS = ("balance/grad_cos_min", "balance/neg_cos_share")
# velocity-norm inflation ||v_theta|| / ||v_ref|| per step bucket (trainers.vnorm logs vnorm/norm_ratio/<bucket>)
INFLATION_PREFIXES = ("vnorm/inflation/", "vnorm/norm_ratio")


# ---- training runs ----------------------------------------------------------------------------------------------
def load_metrics(path: Path) -> list[dict[str, Any]]:
    """Rows of a metrics.jsonl. A cut-off last line (a run still writing, or killed) is skipped with a warning; a
    malformed line elsewhere is an error naming the file and line."""
    path = Path(path)
    if path.is_dir():  # it said "does not exist" of a folder that does
        raise ValueError(
            f"{path} is a folder; `imgalign report` reads the file metrics.jsonl a training run writes"
        )
    if not path.is_file():
        folder, hint = path.parent, ""
        if (folder / "trainer_state").is_dir() and folder.parent.name == "checkpoints":
            hint = f"; {str(folder)!r} is a checkpoint: give its run folder, {str(folder.parent.parent)!r}"
        elif (folder / "summary.json").is_file():
            hint = f"; {str(folder)!r} is an evaluation: its report is {str(folder / 'report.md')!r}"
        elif path.name == "metrics.jsonl" and (folder / "config.yaml").is_file():  # set up, in its first step
            hint = (
                f"; {str(folder)!r} is a training run that has not finished a step (it writes a metrics row after "
                "each): report it once it has"
            )
        elif folder.is_file():  # --compare LABEL=RUN/metrics.jsonl: it said RUN/metrics.jsonl/metrics.jsonl
            hint = f"; {str(folder)!r} is a file: give the run folder that holds it, {str(folder.parent)!r}"
        elif (folder.parent / "metrics.jsonl").is_file():  # RUN/checkpoints, RUN/report, RUN/samples
            hint = f"; {str(folder)!r} is inside the run folder {str(folder.parent)!r}: give that"
        raise FileNotFoundError(
            f"{path} does not exist; `imgalign report` needs a run folder with metrics.jsonl{hint}"
        )
    try:
        # -sig: a BOM from an editor is not a row error
        text = path.read_text(encoding="utf-8-sig")
        lines = text.splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read {path}: {e}") from None
    rows: list[dict[str, Any]] = []
    numbered = [(n, ln) for n, ln in enumerate(lines, start=1) if ln.strip()]
    for k, (n, line) in enumerate(numbered):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            if k == len(numbered) - 1:
                # a run cut mid-write leaves its last line without its newline; a whole line that is no JSON (a
                # hand edit) was called "incomplete" too
                if text.rstrip(" \t").endswith(("\n", "\r")):
                    log.warning("%s:%d: last line is not valid JSON (%s); skipped", path, n, e.msg)
                else:
                    log.warning("%s:%d: incomplete last line skipped", path, n)
                continue
            raise ValueError(f"{path}:{n}: not valid JSON ({e.msg})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{n}: expected one flat JSON object per line")
        step = row.get("step", 0)  # plots and sorts read it as the x value
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not math.isfinite(step):
            raise ValueError(
                f"{path}:{n}: key 'step' is {step!r}; it must be a number (the training step), or leave the key out"
            )
        rows.append(row)
    _warn_of_steps_out_of_order(path, [(n, r["step"]) for (n, _), r in zip(numbered, rows) if "step" in r])
    if not rows:
        why = "its only line is incomplete" if numbered else "it is empty"
        if path.name == "eval.jsonl":  # it said "one per step", of the in-loop evaluation's log
            raise ValueError(f"{path} holds no evaluation rows ({why})")
        raise ValueError(
            f"{path} holds no metrics rows ({why}): a training run writes one per step; report it once the run "
            "has finished a step"
        )
    return rows


def _warn_of_steps_out_of_order(path: Path, steps: Sequence[tuple[int, float]]) -> None:
    """Warn once when a step is not after the one before it ((line, step) pairs): the trainer writes them in order
    and trims them when it resumes, so the file was edited or two runs were pasted into one; rows are read in file
    order, so its curves double back."""
    for (_, before), (n, step) in zip(steps, steps[1:]):
        if step <= before:
            log.warning(
                "%s:%d: step %s comes after step %s (a training run writes each step once, in order): were two runs "
                "pasted into one file? Its rows are read in file order; report each run from its own folder",
                path,
                n,
                _plain(step),
                _plain(before),
            )
            return


def _plain(step: float) -> str:
    """12 for 12.0: steps are integers unless a user wrote otherwise."""
    return str(int(step)) if float(step).is_integer() else str(step)


def series(rows: Sequence[dict[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of the rows that carry a finite number under `key`; steps default to the row index."""
    xs, ys = [], []
    for i, r in enumerate(rows):
        v = r.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            xs.append(r.get("step", i))
            ys.append(float(v))
    return np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)


def ema(values: np.ndarray, alpha: float) -> np.ndarray:
    """Exponential moving average, bias-corrected from the first value: s_t = (1-a) s_{t-1} + a v_t."""
    out = np.empty_like(values)
    acc, norm = 0.0, 0.0
    for i, v in enumerate(values):
        acc = (1 - alpha) * acc + alpha * v
        norm = (1 - alpha) * norm + alpha
        out[i] = acc / norm
    return out


def metric_groups(keys: Sequence[str]) -> dict[str, list[str]]:
    """Which plots a run gets: per-reward means, KL, clip fraction, norm inflation, the velocity penalty and the
    multi-reward balance (only those present)."""
    keys = sorted(set(keys))
    groups = {
        "rewards": [k for k in keys if REWARD_MEAN.match(k)],
        "kl": [k for k in KL_KEYS if k in keys],
        "clipfrac": [k for k in keys if k == "policy/clipfrac"],
        "inflation": [k for k in keys if k.startswith(INFLATION_PREFIXES) or k == "policy/vnorm_ratio"],
        "penalty": [k for k in keys if k == "policy/penalty"],
        "balance": [k for k in keys if k.startswith(BALANCE_PREFIXES) or k in BALANCE_KEYS],
    }
    return {g: ks for g, ks in groups.items() if ks}


GROUP_TITLES = {
    "rewards": "reward (mean over samples)",
    "kl": "KL to the reference policy",
    "clipfrac": "clipped fraction",
    "inflation": "velocity-norm inflation",
    "penalty": "velocity penalty (before its weight)",
    "balance": "multi-reward balance: alpha and gradient cosines with the update",
}


def agg_pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend. An MPLBACKEND in the environment that matplotlib does not know (one
    mistyped, or left from another tool) failed its import with "Key backend: 'x' is not a valid value for backend;
    supported values are [...]", which named no variable; the plots draw with Agg whatever it says."""
    import os

    try:
        import matplotlib
    except ValueError as e:
        backend = os.environ.get("MPLBACKEND")
        if not backend or "backend" not in str(e):
            raise
        raise ValueError(
            f"the environment's MPLBACKEND={backend!r} is not a matplotlib backend, and matplotlib does not load "
            "with it; unset MPLBACKEND (imgalign draws its plots with Agg) or give a backend such as agg"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_run(rows: Sequence[dict[str, Any]], out_dir: Path) -> list[Path]:
    """One PNG per metric group in `out_dir` (matplotlib, Agg backend); raw values thin, smoothed thick."""
    plt = agg_pyplot()

    out_dir = Path(out_dir)
    keys = {k for r in rows for k in r}
    written = []
    for group, ks in metric_groups(sorted(keys)).items():
        n = len(ks) if group == "rewards" else 1
        fig, axes = plt.subplots(n, 1, figsize=(7, 2.6 * n), squeeze=False, sharex=True)
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                _draw_group(axes, rows, group, ks, keys)
                written.append(_save_figure(fig, out_dir / f"{group}.png"))
        # a value near the float limit (1e308, a diverged metric) overflows matplotlib's axis range: "arange: cannot
        # compute length", naming nothing, and no report.md
        except (ValueError, OverflowError) as e:
            plt.close(fig)
            largest = max((float(np.abs(series(rows, k)[1]).max(initial=0.0)) for k in ks), default=0.0)
            log.warning(
                "left out %s.png: matplotlib could not draw %s (%s; the largest |value| is %.3g, a diverged "
                "metric?); report.md still lists them",
                group,
                ", ".join(ks),
                e,
                largest,
            )
    return written


def _draw_group(
    axes: Any, rows: Sequence[dict[str, Any]], group: str, ks: Sequence[str], keys: set[str]
) -> None:
    """Draw the metrics `ks` of one plot group on `axes` (one panel per reward, one panel for the other groups):
    raw values thin, smoothed thick, a reward's ``mean ± std`` band."""
    for i, k in enumerate(ks):
        ax = axes[i if group == "rewards" else 0][0]
        x, y = series(rows, k)
        if not len(y):
            continue
        alpha = min(1.0, 10.0 / len(y))
        (line,) = ax.plot(x, y, lw=0.8, alpha=0.45 if alpha < 1 else 1.0, label=None if alpha < 1 else k)
        if alpha < 1:
            ax.plot(x, ema(y, alpha), lw=2, color=line.get_color(), label=k)
        std_key = k[: -len("/mean")] + "/std" if group == "rewards" else None
        if std_key and std_key in keys:
            xs, s = series(rows, std_key)
            if len(s) == len(y) and np.array_equal(xs, x):
                ax.fill_between(x, y - s, y + s, color=line.get_color(), alpha=0.15, lw=0)
        ax.set_ylabel(k[len("reward/") : -len("/mean")] if group == "rewards" else group)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    axes[-1][0].set_xlabel("step")
    axes[0][0].figure.suptitle(GROUP_TITLES[group])


def _save_figure(fig: Any, path: Path) -> Path:
    """Write a matplotlib figure as an RGB PNG (atomically, as every imgalign image) and close it."""
    import matplotlib.pyplot as plt
    from PIL import Image

    from imgalign.eval.gallery import save_png

    fig.tight_layout()
    fig.canvas.draw()
    img = Image.frombuffer("RGBA", fig.canvas.get_width_height(), fig.canvas.buffer_rgba()).convert("RGB")
    plt.close(fig)
    save_png(img, path)
    return path


def eval_overall_keys(evals: Sequence[dict[str, Any]]) -> list[str]:
    """Each suite's headline score in ``eval.jsonl`` rows: ``eval/<suite>/overall``."""
    return sorted({k for r in evals for k in r if k.startswith("eval/") and k.endswith("/overall")})


def plot_evals(evals: Sequence[dict[str, Any]], out_dir: Path) -> Path | None:
    """``eval.png``: each suite's overall score at every in-loop evaluation (step 0: the base model); None when
    `evals` hold none."""
    keys = eval_overall_keys(evals)
    if not keys:
        return None
    plt = agg_pyplot()

    fig, ax = plt.subplots(1, 1, figsize=(7, 2.6))
    for k in keys:
        x, y = series(evals, k)
        ax.plot(x, y, marker="o", lw=1.5, label=k)
    ax.set_xlabel("step")
    ax.set_ylabel("overall")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.suptitle("in-loop evaluation (step 0: the base model)")
    return _save_figure(fig, Path(out_dir) / "eval.png")


def eval_lines(evals: Sequence[dict[str, Any]]) -> list[str]:
    """Markdown table of the in-loop evaluations (``eval.jsonl``): every ``eval/`` metric at its first and its last
    evaluated step, and the change; [] when there are none."""
    keys = sorted({k for r in evals for k in r if k.startswith("eval/")})
    rows = []
    # grouped by suite (eval/<suite>/...), each suite's overall first
    for k in sorted(keys, key=lambda k: (k.rsplit("/", 1)[0], not k.endswith("/overall"), k)):
        x, y = series(evals, k)
        if len(y):
            rows.append(
                f"| `{k}` | {y[0]:.4g} (step {x[0]:g}) | {y[-1]:.4g} (step {x[-1]:g}) | {y[-1] - y[0]:+.4g} |"
            )
    if not rows:
        return []
    return ["In-loop evaluation (`eval.jsonl`):", "", "| metric | first | last | change |",
            "| --- | ---: | ---: | ---: |", *rows]  # fmt: skip


def window_change(y: np.ndarray, frac: float = 0.1) -> tuple[float, float, int]:
    """Change of a noisy per-step series y [n] (n >= 4) from the mean of its first `frac` to the mean of its last,
    with the standard error of that difference from the two windows' sample variances: (change, se, window size).
    One row per step is far too noisy to compare (a rollout batch's mean reward), so the windows are at least 2."""
    m = max(2, int(len(y) * frac))
    head, tail = y[:m], y[-m:]
    # values near 1e308 (a diverged metric): an inf standard error, without numpy's overflow warning
    with np.errstate(over="ignore", invalid="ignore"):
        se = float(np.sqrt((head.var(ddof=1) + tail.var(ddof=1)) / m))
    return float(tail.mean() - head.mean()), se, m


def window_change_line(key: str, y: np.ndarray) -> str:
    change, se, m = window_change(y)
    return (
        f"`{key}` moved {change:+.4g} ± {se:.2g} (standard error) from the mean of its first {m} logged steps to "
        f"the mean of its last {m}."
    )


def reward_change_lines(rows: Sequence[dict[str, Any]], groups: dict[str, list[str]]) -> list[str]:
    """:func:`window_change_line` for each reward mean logged on at least 4 steps."""
    out = []
    for k in groups.get("rewards", []):
        _, y = series(rows, k)
        if len(y) >= 4:
            out.append(window_change_line(k, y))
    return out


def masking_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Warnings for a run that trained on less than it sampled: samples masked for a non-finite reward score
    (``reward/<name>/masked``, or ``/nonfinite`` in older logs, naming the rewards), optimizer updates without a
    valid sample (``train/empty_updates``) or with a non-finite gradient (``train/skipped_updates``), both skipped."""
    n = len(rows)
    keys = {k for r in rows for k in r if REWARD_MASKED.match(k)}
    masked, read = [], set()
    for key in sorted(keys):
        name, kind = REWARD_MASKED.match(key).groups()  # type: ignore[union-attr]
        if kind == "nonfinite" and f"reward/{name}/masked" in keys:
            continue
        _, y = series(rows, key)
        if y.sum() > 0:
            masked.append(f"{name} {int(y.sum())} in {int((y > 0).sum())} of {n} steps")
            read.add(kind)
    lines = []
    if masked:
        lines.append(
            "WARNING: samples masked for a non-finite (NaN/inf) reward score, left out of the advantages and the "
            f"loss (reward/<name>/{'|'.join(sorted(read))}): {', '.join(masked)}"
        )
    for key, why in (
        ("train/empty_updates", "no valid sample (every group tied or masked), nothing to train on"),
        ("train/skipped_updates", "a non-finite gradient"),
    ):
        _, y = series(rows, key)
        if y.sum() > 0:
            lines.append(
                f"WARNING: {int(y.sum())} optimizer update(s) in {int((y > 0).sum())} of {n} steps were skipped "
                f"({key}): {why}"
            )
    return lines


def nonfinite_lines(rows: Sequence[dict[str, Any]], keys: Sequence[str]) -> list[str]:
    """A warning naming each of `keys` logged as NaN or inf (a number JSON spells NaN, Infinity) in some rows, with how
    many of the rows that carry it: the table and the plots show finite values only, so a diverged KL or a reward
    that was NaN would otherwise vanish from the report."""
    found = []
    for k in keys:
        vals = [r[k] for r in rows if k in r and r[k] is not None]
        bad = sum(isinstance(v, float) and not math.isfinite(v) for v in vals)
        if bad:
            found.append(f"`{k}` {bad} of {len(vals)} rows")
    if not found:
        return []
    return [
        "WARNING: non-finite (NaN/inf) values logged, left out of the table and the plots: "
        + ", ".join(found)
    ]


def non_number_lines(rows: Sequence[dict[str, Any]], keys: Sequence[str]) -> list[str]:
    """A warning naming each of `keys` logged in some rows as something other than a number (text such as
    ``"0.5"``, a list, true/false: a custom logger's value), with how many of the rows that carry it: the table said
    "no finite value" and the warning above it counted NaN/inf only."""
    found = []
    for k in keys:
        vals = [r[k] for r in rows if k in r and r[k] is not None]
        bad = sum(isinstance(v, bool) or not isinstance(v, (int, float)) for v in vals)
        if bad:
            found.append(f"`{k}` {bad} of {len(vals)} rows")
    if not found:
        return []
    return [
        "WARNING: values that are not numbers (text, lists, true/false) logged, left out of the table and the "
        "plots: " + ", ".join(found)
    ]


def summarize_run(
    rows: Sequence[dict[str, Any]],
    run_name: str = "run",
    evals: Sequence[dict[str, Any]] = (),
    plots: Sequence[str] | None = None,
) -> str:
    """A short markdown summary: steps covered, then first / last / best / last-10% mean of the key metrics, and
    the in-loop evaluations `evals` (``eval.jsonl`` rows) when there are any. `plots`: the names of the plots
    written (``rewards`` for rewards.png), when they are known; by default every plot the metrics call for."""
    steps = [r["step"] for r in rows if isinstance(r.get("step"), (int, float))]
    keys = sorted({k for r in rows for k in r})
    groups = metric_groups(keys)
    lines = [f"# Training report: {run_name}", ""]
    span = f"steps {min(steps):g}-{max(steps):g}" if steps else "no `step` field"
    lines += [f"{len(rows)} logged rows, {span}.", ""]
    lines += [x for line in masking_lines(rows) for x in (line, "")]
    shown = [k for g in GROUP_TITLES for k in groups.get(g, [])]
    lines += [x for line in nonfinite_lines(rows, shown) for x in (line, "")]
    lines += [x for line in non_number_lines(rows, shown) for x in (line, "")]
    evaluated = eval_lines(evals)
    if not shown:
        lines.append("No reward, KL, clip-fraction, norm-inflation, penalty or balance metrics were logged.")
        if evaluated:
            lines += ["", *evaluated]
        # plot_evals draws only the suites' overall scores (none: no eval.png)
        if eval_overall_keys(evals) and (plots is None or "eval" in plots):
            lines += ["", "Plots: [eval](eval.png)"]
        return "\n".join(lines) + "\n"
    lines += ["| metric | first | last | best | mean of last 10% |", "| --- | ---: | ---: | ---: | ---: |"]
    for k in shown:
        _, y = series(rows, k)
        if not len(y):  # named, not left out silently (the warning above says why)
            lines.append(f"| `{k}` | no finite value | — | — | — |")
            continue
        tail = y[-max(1, len(y) // 10) :]
        best = f"{y.max():.4g}" if REWARD_MEAN.match(k) else "—"
        lines.append(f"| `{k}` | {y[0]:.4g} | {y[-1]:.4g} | {best} | {tail.mean():.4g} |")
    for line in reward_change_lines(rows, groups):
        lines += ["", line]
    if evaluated:
        lines += ["", *evaluated]
    drawn = [g for g in GROUP_TITLES if g in groups]
    drawn += ["eval"] if eval_overall_keys(evals) else []
    missing = [g for g in drawn if plots is not None and g not in plots]
    links = ", ".join(f"[{g}]({g}.png)" for g in drawn if g not in missing) or "none"
    lines += [
        "",
        f"Plots: {links}"
        + (f" (not drawn: {', '.join(missing)}; the command's warning says why)" if missing else ""),
    ]
    return "\n".join(lines) + "\n"


def run_summary_lines(run_dir: Path) -> list[str]:
    """What a finished run measured, printed at the end of ``imgalign train``: each suite's in-loop evaluation at
    its first and last evaluated step (``eval.jsonl``), then each reward's change between the first and the last 10%
    of the steps (a single step's mean reward is one noisy batch, so the last row alone says little), then
    :func:`masking_lines` (samples masked for non-finite rewards, skipped updates). A log that cannot be read is
    named in a line of its own: the run has finished, so its summary must not turn it into a failure."""
    run_dir = Path(run_dir)
    lines: list[str] = []

    def read(path: Path) -> list[dict[str, Any]]:
        try:
            return load_metrics(path)
        except ValueError as e:
            lines.append(f"(not summarised: {e})")
            return []

    if (run_dir / "eval.jsonl").is_file():
        evals = read(run_dir / "eval.jsonl")
        for k in eval_overall_keys(evals):
            steps, y = series(evals, k)
            if len(y) == 1:  # one evaluation (a 1-step run): no "x at step 1 -> x at step 1"
                lines.append(f"`{k}` {y[0]:.4g} at step {steps[0]:g}")
            elif len(y):
                lines.append(f"`{k}` {y[0]:.4g} at step {steps[0]:g} -> {y[-1]:.4g} at step {steps[-1]:g}")
    if (run_dir / "metrics.jsonl").is_file():
        rows = read(run_dir / "metrics.jsonl")
        lines += reward_change_lines(rows, metric_groups([k for r in rows for k in r]))
        lines += masking_lines(rows)
    return lines


def make_output_folder(path: Path) -> None:
    """Create the report folder `path`; a file in its place or on its way, or a folder that takes no new file, is a
    clear error naming it (as every command's --out), not an OS one."""
    from imgalign.commands import check_output_folder

    check_output_folder(path)
    path.mkdir(parents=True, exist_ok=True)


def _home_hint(path: str) -> str:
    """:func:`imgalign.hub.tilde_hint` for ``~`` and ``~/...`` (a quoted ~ the shell left); "" otherwise."""
    from imgalign.hub import tilde_hint

    return tilde_hint(path) if path == "~" or path.startswith("~/") else ""


def _refuse_evaluation_folder(out_dir: Path) -> None:
    """--out of a run's report must not be an ``imgalign eval`` output folder: the run's report.md replaced the
    evaluation's own (its scores' summary) without a word, its plots mixed in among the evaluation's files."""
    held = [name for name in ("eval_args.json", "summary.json") if (out_dir / name).is_file()]
    if held:
        raise ValueError(
            f"--out {str(out_dir)!r} holds an `imgalign eval` output ({held[0]}), whose report.md the run's report "
            "would replace: give another folder, or leave --out out (RUN_DIR/report)"
        )


def write_run_report(run_dir: Path, out_dir: Path | None = None) -> tuple[Path, list[Path]]:
    """Plots and report.md for a run folder (default output: RUN_DIR/report/)."""
    from imgalign.files import atomic_write_text

    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise NotADirectoryError(
            f"{str(run_dir)!r} is a file, not a run folder; give the training run's folder (its log.output_dir, "
            "which holds metrics.jsonl)"
        )
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run folder {str(run_dir)!r} does not exist{_home_hint(str(run_dir))}")
    if out_dir and _home_hint(str(out_dir)):  # it made a folder named ~ in the working folder
        raise ValueError(f"--out {str(out_dir)!r} would be a folder named '~' here{_home_hint(str(out_dir))}")
    rows = load_metrics(run_dir / "metrics.jsonl")
    evals: list[dict[str, Any]] = []
    if (run_dir / "eval.jsonl").is_file():
        try:
            evals = load_metrics(run_dir / "eval.jsonl")
        except ValueError as e:  # a damaged evaluation log does not hide the training metrics
            log.warning("%s; the report leaves the in-loop evaluation out", e)
    agg_pyplot()  # before the folder is made: a matplotlib that fails to load (MPLBACKEND) left it empty
    if out_dir:
        out_dir = Path(out_dir)
        _refuse_evaluation_folder(out_dir)
        make_output_folder(out_dir)
    else:
        out_dir = run_dir / "report"
        try:
            make_output_folder(out_dir)
        except ValueError as e:  # named --out, which the user did not give (a read-only run folder)
            raise ValueError(
                f"{e}; that is the default place: give --out DIR to write the report elsewhere"
            ) from None
    plots = plot_run(rows, out_dir)
    plots += [p for p in [plot_evals(evals, out_dir)] if p is not None]
    md = out_dir / "report.md"
    atomic_write_text(md, summarize_run(rows, run_dir.name, evals, plots=[p.stem for p in plots]))
    return md, plots


# ---- several runs side by side (seeds of each configuration) --------------------------------------------------
def load_run_rows(run_dir: Path) -> list[dict[str, Any]]:
    """metrics.jsonl of a run with its eval.jsonl merged in (every evaluation, the base model's at step 0 too). A
    damaged eval.jsonl is left out with a warning, as :func:`write_run_report` leaves it out: the evaluations the
    metrics rows carry stay (it stopped the comparison of every run)."""
    run_dir = Path(run_dir)
    rows = load_metrics(run_dir / "metrics.jsonl")
    ev = run_dir / "eval.jsonl"
    if ev.is_file():
        try:
            evals = load_metrics(ev)
        except ValueError as e:
            log.warning(
                "%s; the comparison takes %s's in-loop evaluations from its metrics.jsonl (without step 0)",
                e,
                run_dir,
            )
            return rows
        rows = [{k: v for k, v in r.items() if not k.startswith("eval/")} for r in rows]
        rows += evals
        rows.sort(key=lambda r: r.get("step", 0))
    return rows


def series_vs(rows: Sequence[dict[str, Any]], key: str, x_key: str = "step") -> tuple[np.ndarray, np.ndarray]:
    """(x, values) of `key`, x read from a cumulative counter such as ``perf/nfe_total`` at the same step
    (the counter is 0 at step 0, where the base model is evaluated)."""
    if x_key == "step":
        return series(rows, key)
    at = {0: 0.0}
    for r in rows:
        if isinstance(r.get(x_key), (int, float)) and "step" in r:
            at[r["step"]] = float(r[x_key])
    steps, ys = series(rows, key)
    keep = [i for i, s in enumerate(steps) if s in at]
    return np.asarray([at[steps[i]] for i in keep]), ys[keep]


def counter_drop(rows: Sequence[dict[str, Any]], x_key: str) -> tuple[float, float, float, float] | None:
    """Where the counter `x_key` first goes down in `rows` (in their order): (step, value, next step, its lower
    value); None when it only grows. ``perf/sec_total`` counts from each resume of a run, so it drops there."""
    last: tuple[float, float] | None = None
    for r in rows:
        v = r.get(x_key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            continue
        step = r.get("step", 0)
        if last is not None and v < last[1]:
            return last[0], last[1], step, float(v)
        last = (step, float(v))
    return None


def first_reaching(x: np.ndarray, y: np.ndarray, target: float, window: int = 1) -> float | None:
    """The first x at which the trailing `window`-point mean of y reaches `target` (None if it never does).

    x, y: (N,) in logging order. With window 1 this is the first x with y >= target."""
    for i in range(len(y)):
        lo = max(0, i - window + 1)
        if i + 1 >= window and y[lo : i + 1].mean() >= target:
            return float(x[i])
    return None


def group_mean(curves: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The mean curve of runs logged at (x_i [N_i], y_i [N_i]), x increasing, over the x span every run covers (a
    run that stopped early ends it): each run is interpolated linearly onto the x values any run logged in that
    span, so runs logged at the same x average their own values there, and runs with different x (a skipped
    point, different NFE counts per step) are never paired by list position."""
    lo, hi = max(float(cx[0]) for cx, _ in curves), min(float(cx[-1]) for cx, _ in curves)
    grid = np.unique(np.concatenate([cx[(cx >= lo) & (cx <= hi)] for cx, _ in curves]))
    return grid, np.mean([np.interp(grid, cx, cy) for cx, cy in curves], axis=0)


def run_names(runs: Sequence[Path]) -> dict[Path, str]:
    """Each run folder's name in compare.md: its folder name, or as many of its last path parts as tell it apart from
    the other runs' (``exp1/flow_grpo`` and ``exp2/flow_grpo`` were both `flow_grpo`, their rows alike). A run given
    twice (in two groups) keeps one name."""
    full = {Path(r): Path(r).resolve().parts for r in runs}
    names = {}
    for run, parts in full.items():
        others = {p for p in full.values() if p != parts}
        n = next(n for n in range(1, len(parts) + 1) if all(o[-n:] != parts[-n:] for o in others))
        names[run] = str(Path(*parts[-n:]))
    return names


def plain_text(text: str) -> str:
    """`text` for a matplotlib label, drawn as written: between two '$' matplotlib reads TeX math, so a --compare
    label 'a$\\alpha_{x$' stopped the report with "ParseSyntaxException: Expected end_group" (naming no label),
    and 'cost $5 and $10' lost its '$' signs to italics."""
    return text.replace("$", r"\$")


def compare_runs(
    groups: dict[str, list[Path]],
    keys: Sequence[str],
    out_dir: Path,
    x_key: str = "step",
    target: tuple[str, float] | None = None,
    window: int = 10,
) -> tuple[Path, Path]:
    """Overlay groups of runs (label -> run folders, e.g. the seeds of one config): ``compare.png`` with one panel
    per key (a thin line per run, smoothed when dense; a thick line for the group mean, :func:`group_mean`), and
    ``compare.md`` with each run's first and last value of every key and, with `target` = (key, value), the x
    (e.g. cumulative NFEs) at which the run's trailing `window`-point mean of that key first reaches the value,
    and the ratio of the group means. Returns (markdown path, PNG path)."""
    plt = agg_pyplot()

    from imgalign.eval.suite import table_cell
    from imgalign.files import atomic_write_text

    if not groups or not keys:
        raise ValueError("compare needs at least one LABEL=RUN group and one metric key")
    runs = {label: [(Path(r), load_run_rows(Path(r))) for r in paths] for label, paths in groups.items()}
    logged = {k for items in runs.values() for _, rows in items for row in rows for k in row}
    wanted = list(keys) + [x_key] + ([target[0]] if target else [])
    unknown = [k for k in dict.fromkeys(wanted) if k not in logged]
    if unknown:
        # those of the same kind first (reward/...): the first 25 in order were eval/* and perf/* of a run that logs
        # 40 keys, and never the reward means a misspelt reward key was meant as
        kinds = {k.split("/", 1)[0] for k in unknown}
        shown = sorted(logged, key=lambda k: (k.split("/", 1)[0] not in kinds, k))
        # --keys A,B (as --seeds takes its list) was one unknown key, though the runs log A and B
        listed = [k for k in unknown if "," in k and all(part in logged for part in k.split(","))]
        if listed:
            raise ValueError(
                f"no run logs {listed[0]!r}, but they log each of its comma-separated parts: --keys takes keys "
                f"separated by spaces, --keys {' '.join(listed[0].split(','))}"
            )
        raise ValueError(
            f"no run logs {', '.join(map(repr, unknown))}; keys these runs log include: "
            f"{', '.join(shown[:25])}{' ...' if len(logged) > 25 else ''}"
        )
    # a counter that drops (perf/sec_total of a resumed run) gave a curve that runs back, an interpolated group
    # mean of nothing, and a --target x counted from the resume, silently
    for items in runs.values():
        for run, rows in items:
            drop = counter_drop(rows, x_key) if x_key != "step" else None
            if drop is not None:
                raise ValueError(
                    f"--x {x_key!r} goes down in run {str(run)!r} ({drop[1]:g} at step {drop[0]:g}, then {drop[3]:g} "
                    f"at step {drop[2]:g}): the x axis must be a counter that only grows, or the run's curve, the "
                    "group mean and --target would be wrong (perf/sec_total counts from each resume of a run); "
                    "use --x perf/nfe_total or --x step"
                )
    names = run_names([run for items in runs.values() for run, _ in items])
    out_dir = Path(out_dir)
    make_output_folder(out_dir)
    fig, axes = plt.subplots(1, len(keys), figsize=(5 * len(keys), 3.6), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    no_mean: list[str] = []  # groups whose runs share no x span
    for ax, key in zip(axes[0], keys):
        for gi, (label, items) in enumerate(runs.items()):
            c = colours[gi % len(colours)]
            curves = []
            for _, rows in items:
                x, y = series_vs(rows, key, x_key)
                if not len(y):
                    continue
                dense = len(y) >= 20
                ys = ema(y, min(1.0, 10.0 / len(y))) if dense else y
                ax.plot(x, ys, "-" if dense else "o-", color=c, alpha=0.35, lw=1)
                curves.append((x, ys))
            if curves:
                mx, my = group_mean(curves)
                n = len(mx)
                # a run and its continuation in another folder: the legend said "mean of 2" of no line
                if not n:
                    no_mean.append(f"{label} (`{key}`)")
                ax.plot(
                    mx,
                    my,
                    "-" if n >= 20 else "o-",
                    color=c,
                    lw=2.2,
                    label=f"{plain_text(label)} (mean of {len(curves)})"
                    if n
                    else f"{plain_text(label)} (no mean: no common {plain_text(x_key)})",
                )
        ax.set_title(plain_text(key), fontsize=9)
        ax.set_xlabel(plain_text(x_key))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    png = out_dir / "compare.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)

    lines = [
        "# Runs compared",
        "",
        "| group | run | metric | first | last |",
        "| --- | --- | --- | ---: | ---: |",
    ]
    for label, items in runs.items():
        for run, rows in items:
            # a '|' or a line break in a label or folder name split or ended the row
            who = f"| {table_cell(label)} | `{table_cell(names[run])}` |"
            for key in keys:
                _, y = series(rows, key)
                if len(y):
                    lines.append(f"{who} `{key}` | {y[0]:.4g} | {y[-1]:.4g} |")
                elif any(key in row for row in rows):  # logged as NaN/inf only (a diverged KL)
                    lines.append(f"{who} `{key}` | no finite value | — |")
                else:  # e.g. balance/* of a run without rewards.diagnose_cosines: named, not left out silently
                    lines.append(f"{who} `{key}` | not logged | — |")
    # NaN/inf rows are left out of the table and the plot: each run's are named (they vanished silently)
    for label, items in runs.items():
        for run, rows in items:
            lines += [f"\n{label} `{names[run]}`: {w}" for w in nonfinite_lines(rows, keys)]
    # a run without the x counter (--x perf/nfe_total for a run that predates it) has no curve in the plot
    no_x = [
        f"{label} `{names[run]}`"
        for label, items in runs.items()
        for run, rows in items
        if x_key != "step" and not any(x_key in row for row in rows)
    ]
    if no_x:
        lines += ["", f"Not in the plot (they do not log `{x_key}`, the x axis): {', '.join(no_x)}"]
    if no_mean:
        lines += [
            "",
            f"No group mean for {', '.join(no_mean)}: the group's runs share no `{x_key}` span (the mean covers only "
            "the span that every run of a group logs); each run is drawn alone",
        ]
    if target is not None:
        tkey, tval = target
        lines += [
            "",
            f"## {x_key} to reach `{tkey}` >= {tval:g} (trailing mean of {window} logged points)",
            "",
        ]
        lines += ["| group | per run | mean over runs that reached it |", "| --- | --- | ---: |"]
        means = {}
        for label, items in runs.items():
            logged = [series_vs(rows, tkey, x_key) for _, rows in items]
            hits = [first_reaching(x, y, tval, window) for x, y in logged]
            got = [h for h in hits if h is not None]
            means[label] = float(np.mean(got)) if got else None
            # which run is which: "8 logged points, ..., 8 logged points, ..." named none of a group's runs
            cells = ", ".join(
                (f"`{table_cell(names[run])}`: " if len(items) > 1 else "")
                + (
                    f"{h:.6g}"
                    if h is not None
                    else f"does not log `{x_key}`"
                    if x_key != "step" and not any(x_key in row for row in rows)
                    else f"does not log `{tkey}`"
                    if not any(tkey in row for row in rows)
                    else f"{len(y)} logged points, fewer than --window {window}"
                    if len(y) < window
                    else "not reached"
                )
                for h, (_, y), (run, rows) in zip(hits, logged, items)
            )
            lines.append(
                f"| {table_cell(label)} | {cells} | "
                f"{'—' if not got else f'{means[label]:.6g} ({len(got)}/{len(hits)})'} |"
            )
        labels = list(means)
        if len(labels) >= 2 and all(means[k] is not None for k in labels[:2]):
            a, b = labels[:2]
            ratio = (
                f"**{means[a] / means[b]:.2f}**" if means[b] else f"undefined ({b} reached it at {x_key} = 0)"
            )
            lines += ["", f"Ratio {a}/{b} of the mean {x_key} to the target: {ratio}"]
    md = out_dir / "compare.md"
    atomic_write_text(md, "\n".join(lines) + "\n")
    return md, png


# ---- evaluation against a baseline ------------------------------------------------------------------------------
def load_summary(eval_dir: Path) -> dict[str, Any]:
    path = Path(eval_dir) / "summary.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist; --baseline needs the --out folder of an earlier, finished `imgalign eval`"
        )
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e.msg})") from None
    except UnicodeDecodeError as e:  # (a bare codec error named no file)
        raise ValueError(
            f"{path}: not UTF-8 text ({e.reason} at byte {e.start}); is it a summary.json?"
        ) from None
    # 'tasks' of another type raised AttributeError in the comparison
    if (
        not isinstance(summary, dict)
        or not isinstance(summary.get("tasks"), dict)
        or not isinstance(summary.get("overall"), (int, float))
    ):
        raise ValueError(
            f"{path}: expected an evaluation summary with 'overall' (a number) and 'tasks' (task -> score)"
        )
    return summary


def load_results(eval_dir: Path) -> list[dict[str, Any]]:
    """The rows of an evaluation's results.jsonl that name their image and verdict (every row the suite writes);
    a line cut short by a crash, or a row without ``file`` or ``correct`` (a hand edit), is skipped (the
    evaluation's own resume skips those without ``file``). Such a row raised KeyError in --baseline's comparison."""
    path = Path(eval_dir) / "results.jsonl"
    if not path.is_file():
        return []
    rows = []
    # (bytes that are not UTF-8, a damaged line, are replaced: that line then fails as JSON and is skipped)
    for line in path.read_text(encoding="utf-8", errors="replace").split("\n"):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a crash
        if isinstance(row, dict) and isinstance(row.get("file"), str) and "correct" in row:
            rows.append(row)
    return rows


def delta_table(current: dict[str, Any], baseline: dict[str, Any]) -> str:
    """Markdown: per task and overall, baseline score, current score and the difference (current - baseline)."""

    def cell(v: float | None) -> str:
        return "—" if v is None else f"{v:.4f}"

    tasks = sorted(set(current["tasks"]) | set(baseline["tasks"]))
    lines = [
        f"| task | baseline (`{baseline.get('model', '?')}`) | current (`{current.get('model', '?')}`) | delta |",
        "| --- | ---: | ---: | ---: |",
    ]
    for t in tasks + ["overall"]:
        b = baseline["overall"] if t == "overall" else baseline["tasks"].get(t)
        c = current["overall"] if t == "overall" else current["tasks"].get(t)
        d = f"{c - b:+.4f}" if b is not None and c is not None else "—"
        name = "**overall**" if t == "overall" else t
        lines.append(f"| {name} | {cell(b)} | {cell(c)} | {d} |")
    return "\n".join(lines)


def comparability_notes(
    current: dict[str, Any], baseline: dict[str, Any], cur_rows: list[dict], base_rows: list[dict]
) -> list[str]:
    """Warnings when the two evaluations are not like for like, and image-level flips when they are."""
    notes = []
    if current.get("suite") != baseline.get("suite"):
        notes.append(
            f"Different suites: baseline `{baseline.get('suite')}`, current `{current.get('suite')}`."
        )
    if current.get("n_images") != baseline.get("n_images"):
        notes.append(
            f"Different image counts: baseline {baseline.get('n_images')}, current {current.get('n_images')}."
        )
    only = sorted(set(current["tasks"]) ^ set(baseline["tasks"]))
    if only:
        notes.append(
            f"Tasks in only one of the two: {', '.join(only)} (the overall scores average different tasks)."
        )
    # e.g. a baseline of the train prompts against an evaluation of the test prompts
    cur_p = {r.get("prompt") for r in cur_rows}
    base_p = {r.get("prompt") for r in base_rows}
    if cur_p and base_p and cur_p != base_p:
        notes.append(
            f"Different prompts: {len(cur_p - base_p)} of the current {len(cur_p)} are not in the baseline and "
            f"{len(base_p - cur_p)} of its {len(base_p)} not in the current (the task scores average different "
            "prompts)."
        )
    # the same file names are the same noise only when the seed and the sampler match (eval_args / sampler)
    cur_args, base_args = current.get("eval_args") or {}, baseline.get("eval_args") or {}
    differ = [k for k in ("seed",) if k in cur_args and k in base_args and cur_args[k] != base_args[k]]
    # a setting recorded by one summary only is a difference (a pipeline's own default against an override),
    # except those summaries written before 2026-12-04 did not record (the shapes suite's image size and context)
    # (only when both generated their images: an evaluation of --images or --ground-truth records no sampler, and
    # re-judging a run's own images pairs them with it)
    cur_s, base_s = current.get("sampler"), baseline.get("sampler")
    if cur_s is not None and base_s is not None:
        added_later = {"height", "width", "max_sequence_length"}
        one_side = (set(cur_s) ^ set(base_s)) - added_later
        if one_side or any(cur_s[k] != base_s[k] for k in set(cur_s) & set(base_s)):
            differ.append("sampler")
    if differ:
        notes.append(
            f"Different {' and '.join(differ)}: the images of one file name are different samples, so they are not "
            "paired; compare the task scores only."
        )
        return notes
    base_by_file = {(r.get("file"), r.get("prompt")): r for r in base_rows}
    shared = [
        (r, base_by_file[k]) for r in cur_rows if (k := (r.get("file"), r.get("prompt"))) in base_by_file
    ]
    if shared:
        fixed = sum(1 for c, b in shared if c["correct"] and not b["correct"])
        broke = sum(1 for c, b in shared if b["correct"] and not c["correct"])
        notes.append(
            f"Same prompt and image index in both: {len(shared)} images; {fixed} now correct that failed before, "
            f"{broke} now failing that were correct."
        )
    return notes


def failure_gallery(
    eval_dir: Path,
    out_png: Path,
    images_dir: Path | None = None,
    max_images: int = 24,
    ncols: int = 6,
    cell: int = 192,
) -> int:
    """A PNG grid of failed images, each captioned with its prompt and the judge's reason; returns how many.

    Failures are spread over tasks (round-robin by task, in file order), so one bad task does not fill the page.
    Returns 0 when nothing failed, and then removes an `out_png` left by an earlier evaluation."""
    from imgalign.eval.gallery import caption_grid, save_png
    from imgalign.eval.suite import UNREADABLE_IMAGE, load_image

    eval_dir = Path(eval_dir)
    images_dir = Path(images_dir) if images_dir else eval_dir / "images"
    fails = [r for r in load_results(eval_dir) if not r.get("correct")]
    by_task: dict[str, list[dict[str, Any]]] = {}
    for r in fails:
        by_task.setdefault(str(r.get("tag")), []).append(r)
    picked: list[dict[str, Any]] = []
    while len(picked) < max_images and any(by_task.values()):
        for t in sorted(by_task):
            if by_task[t] and len(picked) < max_images:
                picked.append(by_task[t].pop(0))
    images, captions = [], []
    for r in picked:
        why = r.get("error") or r.get("reason") or "incorrect"
        try:
            img = load_image(images_dir / r["file"])
        except UNREADABLE_IMAGE:  # (a broken PNG's SyntaxError stopped --baseline with a traceback)
            from PIL import Image

            img = Image.new("RGB", (cell, cell), (200, 200, 200))
            why = f"(image missing) {why}"
        images.append(img)
        captions.append(f"[{r.get('tag')}] {r.get('prompt')}\n{why}")
    if not images:
        Path(out_png).unlink(missing_ok=True)
        return 0
    save_png(caption_grid(images, captions, ncols=ncols, cell=cell), Path(out_png))
    return len(images)


def write_comparison(
    eval_dir: Path, baseline_dir: Path, images_dir: Path | None = None, max_failures: int = 24
) -> str:
    """``comparison.md`` (delta table, notes) and ``failures.png`` in `eval_dir`; returns the markdown."""
    from imgalign.files import atomic_write_text

    eval_dir, baseline_dir = Path(eval_dir), Path(baseline_dir)
    baseline = load_summary(baseline_dir)
    current = load_summary(eval_dir)
    notes = comparability_notes(current, baseline, load_results(eval_dir), load_results(baseline_dir))
    n_fail = failure_gallery(eval_dir, eval_dir / "failures.png", images_dir, max_images=max_failures)
    lines = [f"# Comparison with the baseline `{baseline_dir}`", "", delta_table(current, baseline), ""]
    lines += [f"- {n}" for n in notes]
    if n_fail:
        lines += ["", f"![failures](failures.png) ({n_fail} failed images with the judge's reasons)"]
    md = "\n".join(lines) + "\n"
    atomic_write_text(eval_dir / "comparison.md", md)
    return md
