"""Whether the scaling sweep's 5× goal fits a machine's matrix products: a roofline.

    python benchmarks/roofline.py SWEEP_JSON PRODUCTS_JSON

SWEEP_JSON is a `scaling_sweep` run's results (`rlsys bench run scaling_sweep --out DIR`
writes DIR/scaling_sweep.json) with the CleanRL-style at each point; PRODUCTS_JSON is a
`weight_grad_dots` run's, on the same machine. Per point it prints, as a markdown table:

* the budget: a fifth of the CleanRL-style's seconds per iteration, what the goal allows;
* the least matrix-product work of an iteration (`least_products` in the sweep's case):
  products contracting a layer's inputs (forward, input gradients) and weight gradients
  (contracting the batch's rows);
* how long those products alone take at the best rate any product reached on the machine
  (the fastest system of PRODUCTS_JSON: a square 2048x2048 product, on every core);
* how long they take at the rates each library measured for the layer's own shape (width
  64 or 256, 64,000 rows; forward X·W, weight gradient Xᵀ·dY): XLA:CPU's on every core
  (`xla`), rlsys's (`rlsys`: XLA's, but the weight gradient as rlsys's matmul rule takes it,
  `xla-blocked-`, where that system was measured), PyTorch's on one core (`torch`) and on
  two (`torch2`);
* rlsys's (`auto`) seconds per iteration, where the sweep ran it.

Where the products alone take longer than the budget, an implementation running them at
those rates cannot meet the goal, whatever else it saves. An iteration also has elementwise
work, the environment and the acting loop's small products (a few hundred rows, slower per
FLOP). The layer-shape rates are of products run alone, each writing its output to memory:
inside an iteration XLA fuses some with their neighbours and can run them faster (at
width=256 rlsys's whole iteration beat the `xla` column). Widths other than 64 and 256 take
the nearer one's rates.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARIES = ("xla", "rlsys", "torch", "torch2")


def medians(path: Path, key: str) -> dict[str, float]:
    """System -> its median `key` ("rate" or a metric's name) in a bench run's JSON."""
    rows = json.loads(path.read_text())["summary"]
    found = {}
    for row in rows:
        value = row["rate"] if key == "rate" else row["metrics"].get(key)
        if value is not None and not row.get("skipped"):
            found[row["system"]] = value
    return found


def product_seconds(work: dict[str, float], width: int, rates: dict[str, float],
                    library: str) -> float | None:  # fmt: skip
    """Seconds of `work` (GFLOP by kind) at `library`'s rates for the nearer measured width."""
    shape = "64000" if abs(width - 64) <= abs(width - 256) else "64000x256"
    seconds = 0.0
    for kind, system_kind in (("forward", "forward"), ("weight_grad", "wgrad")):
        if library == "rlsys":  # XLA's products, with the blocked weight gradient if measured
            blocked = rates.get(f"xla-blocked-{shape}") if kind == "weight_grad" else None
            rate = blocked or rates.get(f"xla-{system_kind}-{shape}")
        else:
            rate = rates.get(f"{library}-{system_kind}-{shape}")
        if rate is None:
            return None
        seconds += work[kind] * 1e9 / rate
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep", type=Path, help="a scaling_sweep run's JSON")
    parser.add_argument("products", type=Path, help="a weight_grad_dots run's JSON")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))  # the case module, from this checkout
    from benchmarks.cases.scaling_sweep import grid, least_products
    from rlsys.bench.table import markdown_table

    times, rates = medians(args.sweep, "iter_s"), medians(args.products, "rate")
    ms = lambda s: "—" if s is None else f"{1e3 * s:.1f}"  # noqa: E731
    header = ["point", "budget ms (cleanrl / 5)", "forward GFLOP", "weight-grad GFLOP"]
    best = max(rates.values())
    header += [f"products ms at {best / 1e9:.0f} GFLOP/s (best)"]
    header += [f"products ms at {library}" for library in LIBRARIES] + ["auto ms"]
    rows = []
    for point, factors in grid().items():
        cleanrl = times.get(f"cleanrl@{point}")
        work = least_products(factors)
        cells = [point, ms(None if cleanrl is None else cleanrl / 5),
                 f"{work['forward']:.2f}", f"{work['weight_grad']:.2f}"]  # fmt: skip
        cells.append(ms(sum(work.values()) * 1e9 / best))
        cells += [ms(product_seconds(work, factors["width"], rates, lib)) for lib in LIBRARIES]
        cells.append(ms(times.get(f"auto@{point}")))
        rows.append(cells)
    print(markdown_table(header, rows))


if __name__ == "__main__":
    main()
