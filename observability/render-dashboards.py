#!/usr/bin/python3
"""Draws each moat dashboard's panels from a live Prometheus into one PNG per dashboard, laid out
as the dashboard's grid: a stand-in for Grafana, which is not installable here. Time series come
from /api/v1/query_range, stat panels from /api/v1/query; the dashboard variables take the
values observability/lint.py gives a live check. Panels over moat-controller's metrics with no
data say that they wait for the controller.

usage: observability/render-dashboards.py PROMETHEUS_URL OUT_DIR [--minutes N]
Needs Debian's python3-matplotlib (not part of the checks; run it to refresh docs/images/).
"""

import json
import math
import pathlib
import sys
import time
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "observability"))
import lint  # noqa: E402


def api(base, path, **params):
    url = f"{base}/api/v1/{path}?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=30) as r:
        d = json.load(r)
    if d.get("status") != "success":
        raise RuntimeError(f"{url}: {d}")
    return d["data"]["result"]


def legend(fmt, metric):
    out = fmt or "{{__name__}}"
    for k, v in metric.items():
        out = out.replace("{{" + k + "}}", v)
    return out


def fmt_value(v, unit):
    if v is None or math.isnan(v):
        return "no data"
    if unit == "percentunit":
        return f"{v * 100:.1f}%"
    if unit == "bytes":
        for u in ("B", "KiB", "MiB", "GiB", "TiB"):
            if abs(v) < 1024:
                return f"{v:.1f} {u}"
            v /= 1024
    if unit == "s":
        return f"{v * 1000:.1f} ms" if v < 1 else f"{v:.2f} s"
    return f"{v:.3g}"


def render(base, dashboard_path, out_dir, minutes):
    d = json.loads(dashboard_path.read_text())
    panels = d["panels"]
    # A single-select instance variable (the node dashboard) shows the first instance.
    variables = {v["name"]: v for v in d["templating"]["list"]}
    instance = None
    if not variables["instance"].get("multi", True):
        url = f"{base}/api/v1/label/instance/values?" + urllib.parse.urlencode(
            {"match[]": 'moat_sandboxes{job="moat-agent"}'})
        with urllib.request.urlopen(url, timeout=30) as r:
            instance = sorted(json.load(r)["data"])[0]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels) + 1  # +1: the title
    scale = 0.36  # inches per grid unit
    fig = plt.figure(figsize=(24 * scale * 1.6, rows * scale))
    shown = f"; instance {instance}" if instance else ""
    fig.suptitle(f"{d['title']}  (uid {d['uid']}; live Prometheus, last {minutes} min{shown})",
                 fontsize=12, y=1 - 0.3 / rows)
    end = time.time()
    start = end - minutes * 60
    step = max(2, int(minutes * 60 / 120))
    for p in panels:
        g = p["gridPos"]
        # Figure coordinates: x from the left, y from the top (Grafana's grid).
        # Margins in grid units: room for the title above and the ticks below each panel.
        top = 0.9 if p["type"] != "row" else 0.1
        bottom = 0.7 if p["type"] == "timeseries" else 0.1
        ax = fig.add_axes([g["x"] / 24 + 0.02, 1 - (1 + g["y"] + g["h"] - bottom) / rows,
                           g["w"] / 24 - 0.03, (g["h"] - top - bottom) / rows])
        if p["type"] == "row":
            ax.axis("off")
            ax.text(0, 0.2, p["title"], fontsize=11, weight="bold")
            continue
        ax.set_title(p["title"], fontsize=8, loc="left")
        unit = p["fieldConfig"]["defaults"].get("unit", "short")
        waits = any("moat_controller_" in t["expr"] for t in p["targets"])
        drawn = 0
        for t in p["targets"]:
            expr = lint.substitute(t["expr"], d["uid"])
            if instance:
                expr = expr.replace('instance=~".*"', f'instance=~"{instance}"')
            if p["type"] == "stat":
                res = api(base, "query", query=expr.replace("[5m]", f"[{minutes}m]"), time=end)
                ax.axis("off")
                if res:
                    ax.text(0.5, 0.4, fmt_value(float(res[0]["value"][1]), unit), ha="center",
                            va="center", fontsize=16, color="#1f77b4")
                    drawn += 1
                continue
            res = api(base, "query_range", query=expr, start=start, end=end, step=step)
            for series in res:
                xs = [(float(ts) - end) / 60 for ts, _ in series["values"]]
                ys = [float(v) for _, v in series["values"]]
                ax.plot(xs, ys, linewidth=1, label=legend(t.get("legendFormat"), series["metric"]))
                drawn += 1
        if p["type"] != "stat":
            ax.tick_params(labelsize=6)
            ax.set_xlim(-minutes, 0)
            if unit == "percentunit":
                ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
            elif unit == "bytes":
                ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
                    lambda v, _: fmt_value(v, "bytes")))
            if drawn:
                ax.legend(fontsize=5, loc="upper left", ncol=2, frameon=False)
        if not drawn:
            ax.text(0.5, 0.5, "waits for moat-controller" if waits else "no data",
                    transform=ax.transAxes, ha="center", va="center", fontsize=8, color="#999999")
    out = out_dir / f"{d['uid']}.png"
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    base, out_dir = sys.argv[1].rstrip("/"), pathlib.Path(sys.argv[2])
    minutes = int(sys.argv[sys.argv.index("--minutes") + 1]) if "--minutes" in sys.argv else 10
    out_dir.mkdir(parents=True, exist_ok=True)
    for path in lint.DASHBOARDS:
        print(render(base, path, out_dir, minutes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
