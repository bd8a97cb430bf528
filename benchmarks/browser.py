"""Open a report in headless Chromium and read back what the page did: script errors, the points each
plotly figure drew, its axis types; optionally hover a point and take a screenshot.

Used by the report's browser tests and by ``benchmarks.report_page`` (sizes, the committed
screenshots). Chromium is started as the machines' notes say it must be here: headless, no
sandbox (root), and with background networking off (this machine's network is closed).

The page is probed, not modified: a copy gets one script at the top of its head (collecting every
error any later script raises) and one at the end of its body (after the figures drew, it writes a
JSON summary into a ``<pre id="probe">`` that ``--dump-dom`` returns).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip

_ERRORS = """<script>window.__errors = [];
window.addEventListener("error", function (e) { window.__errors.push(String(e.message)); });
window.addEventListener("unhandledrejection", function (e) { window.__errors.push(String(e.reason)); });
</script>"""

_PROBE = """<script>
setTimeout(function () {
  var out = {errors: window.__errors, plotly: typeof Plotly !== "undefined", graphs: []};
  document.querySelectorAll(".js-plotly-plot").forEach(function (div) {
    var traces = (div._fullData || div.data || []).map(function (t) {
      return {name: t.name, meta: t.meta === undefined ? null : t.meta, type: t.type || "scatter",
              xaxis: t.xaxis || null, template: t.hovertemplate || null,
              points: t.x ? t.x.length : 0, numbers: t.meta === "trials" && t.customdata ?
                Array.prototype.map.call(t.customdata, function (row) { return String(row[0]); }) : []};
    });
    var axes = {};
    Object.keys(div._fullLayout || {}).forEach(function (k) {
      if (/^[xy]axis\\d*$/.test(k)) { axes[k] = {type: div._fullLayout[k].type,
        title: div._fullLayout[k].title ? div._fullLayout[k].title.text : ""}; }
    });
    out.graphs.push({id: div.id, traces: traces, axes: axes, svg: div.querySelectorAll("svg.main-svg").length});
  });
  HOVER
  var pre = document.createElement("pre"); pre.id = "probe"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
}, 500);
</script>"""

# Hover the first point of the first trial trace of ``div_id`` (plotly's own hover, as a mouse would).
_HOVER = """var target = document.getElementById(DIV);
  if (target) {
    var curve = target.data.findIndex(function (t) { return t.meta === "front"; });
    Plotly.Fx.hover(target, [{curveNumber: curve < 0 ? 0 : curve, pointNumber: POINT}]);
    var label = target.querySelector(".hoverlayer .hovertext");
    out.hover = label ? label.textContent : null;
  }"""


def chromium() -> str:
    """The Chromium binary, or "" when none is installed (``make browser`` installs Debian's)."""
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome") or ""


def probe_copy(report: Path, into: Path, hover: str | None = None, point: int = 0, only: str | None = None) -> Path:
    """A copy of ``report`` with the error catcher and the probe; ``hover``: a figure's div id whose
    point to hover; ``only``: show just that figure (for a screenshot), the rest hidden by CSS."""
    html = report.read_text(encoding="utf-8")
    hover_js = _HOVER.replace("DIV", json.dumps(hover)).replace("POINT", str(int(point))) if hover else ""
    probe = _PROBE.replace("HOVER", hover_js)
    if only:
        probe += (
            "<style>h1, h2, h3, p, table, pre, figure:not(#" + only + "), figcaption, section > * "
            "{ display: none; } section, figure#" + only + " { display: block !important; } "
            "body { margin: 0; }</style>"
        )
    html = re.sub(r"<head>", "<head>\n" + _ERRORS, html, count=1)
    html = html.replace("</body>", probe + "\n</body>", 1)
    into.parent.mkdir(parents=True, exist_ok=True)
    into.write_text(html, encoding="utf-8")
    return into


def run_page(page: Path, profile: Path, screenshot: Path | None = None, size: str = "1300,800") -> dict[str, Any]:
    """Load ``page`` in headless Chromium, let its scripts run, return the probe's summary (and write a
    screenshot when asked). Raises RuntimeError when the page never produced a summary."""
    flags = [chromium(), *FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=15000"]
    dom = subprocess.run(
        [*flags, "--dump-dom", page.resolve().as_uri()], capture_output=True, text=True, timeout=180, check=False
    )
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom.stdout, re.S)
    if not found:
        raise RuntimeError(f"the page wrote no probe; Chromium said: {dom.stderr[-2000:]}")
    summary = json.loads(_unescape(found.group(1)))
    if screenshot is not None:
        subprocess.run(
            [*flags, f"--screenshot={screenshot}", f"--window-size={size}", page.resolve().as_uri()],
            capture_output=True, timeout=180, check=False,
        )  # fmt: skip
    return summary


def _unescape(text: str) -> str:
    return text.replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
