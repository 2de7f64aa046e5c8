#!/usr/bin/env python3
"""Plot the fleet benchmark: time until all N Kustomizations are Ready, against N, ours vs Flux.

    scripts/plot-fleet.py RESULTS.jsonl OUT.png

RESULTS.jsonl is what `rflux-fleet run` appends (scripts/bench-fleet.sh). One line per
(implementation, settings profile, variant); the latest run of each N wins. Needs matplotlib;
without it the script creates a venv under $HOME/.cache/rflux-plot-venv, installs matplotlib
from PyPI there and re-runs itself with that interpreter.
"""

import json
import os
import subprocess
import sys


def ensure_matplotlib():
    try:
        import matplotlib  # noqa: F401
        return
    except ImportError:
        pass
    venv = os.path.join(os.path.expanduser("~"), ".cache", "rflux-plot-venv")
    py = os.path.join(venv, "bin", "python3")
    if os.path.realpath(sys.prefix) == os.path.realpath(venv):
        sys.exit("matplotlib is missing from " + venv)
    if not os.path.exists(py):
        subprocess.check_call([sys.executable, "-m", "venv", venv])
    subprocess.check_call([py, "-m", "pip", "install", "-q", "matplotlib"])
    os.execv(py, [py] + sys.argv)


def load(path):
    series = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            if r.get("fleet_secs") is None:
                continue
            key = (r["implementation"], r["profile"], r["variant"])
            series.setdefault(key, {})[r["n"]] = r["fleet_secs"]
    return series


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    ensure_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = load(sys.argv[1])
    if not series:
        sys.exit("no fleet results in " + sys.argv[1])
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for (impl, profile, variant), points in sorted(series.items()):
        ns = sorted(points)
        name = "rflux" if impl == "ours" else "Flux"
        style = "-" if impl == "ours" else "--"
        marker = "o" if profile == "equal" else "s"
        ax.plot(
            ns,
            [points[n] for n in ns],
            style,
            marker=marker,
            label=f"{name}, {profile} settings, variant {variant.upper()}",
        )
        for n in ns:
            ax.annotate(f"{points[n]:.0f}s", (n, points[n]), textcoords="offset points",
                        xytext=(4, 4), fontsize=7)
    ax.set_xlabel("Kustomizations (N), each applying 4 objects")
    ax.set_ylabel("seconds until all Ready")
    ax.set_title("Fleet: time from one apply burst until all Kustomizations are Ready")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[2])
    print("wrote " + sys.argv[2])


if __name__ == "__main__":
    main()
