"""The report as one HTML file: page one the decision memo, then the evidence, the forecast,
the options, predicted against measured, and method and provenance. `interactive=True` embeds
plotly.js once (the file opens offline); `interactive=False` puts each plot in as a PNG (from
kaleido), the form the PDF is printed from."""
from __future__ import annotations

import base64
import html
import tempfile
from pathlib import Path

import jinja2
import numpy as np
import plotly.io as pio

from gpuprobe.errors import GpuprobeError, one_line

from gpuprobe.report.figures import all_figures
from gpuprobe.report.memo import memo

CSS = """
body { font-family: 'DejaVu Sans', Arial, sans-serif; color: #222; max-width: 980px; margin: 24px auto;
       font-size: 13px; line-height: 1.45; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; border-bottom: 1px solid #ccc;
     padding-bottom: 3px; margin-top: 26px; } .sub { color: #666; margin-bottom: 14px; }
table.answer th { width: 110px; background: none; } table.answer td, table.answer th { border: none; padding: 1px 6px; }
.decision { font-size: 15px; background: #eef4ea; border-left: 5px solid #4c9a5a; padding: 10px 14px; }
.partial { background: #fff4e0; border-left: 5px solid #e07b39; padding: 8px 12px; margin: 10px 0; }
table { border-collapse: collapse; width: 100%; margin: 8px 0; font-size: 12px; }
th, td { border-bottom: 1px solid #ddd; padding: 4px 6px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.memo { page-break-after: always; font-size: 12px; line-height: 1.35; }
.memo h2 { margin-top: 14px; } .memo table { font-size: 11px; } .memo td, .memo th { padding: 2px 6px; }
.memo ul, .memo ol { margin: 4px 0; } .memo .sub { margin-bottom: 6px; } .plot img { width: 100%; } .missing { color: #a04000; }
@page { size: A4; margin: 14mm; }
"""

TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>gpuprobe report: {{ ev.workload }}</title>
<style>{{ css }}</style></head><body>
<section class="memo">
<h1>Layout decision: {{ ev.workload }}</h1>
<div class="sub">{% if m.answer %}Decided on {{ m.answer.workload }}{% else %}{{ p.requests }} requests
over {{ "%.0f"|format(p.span_s / 60) }} min{% endif %} &middot; written {{ p.written_utc }} &middot;
confidence: {{ m.confidence or "n/a" }}</div>
{% if m.partial %}<div class="partial"><b>Partial report.</b> Missing:
{% for what, cmd in ev.missing %}{{ what }}{% if not loop.last %}; {% endif %}{% endfor %}
(section 6 says how to fill each). No number is shown in their place.</div>{% endif %}
<p class="decision">{{ m.sentence }}</p>
{% if m.answer %}<table class="answer">
<tr><th>Gain</th><td>{{ m.answer.margin }}</td></tr>
<tr><th>Cost</th><td>{{ m.answer.cost }}</td></tr>
<tr><th>SLO</th><td>{{ m.answer.slo }}</td></tr>
<tr><th>Confidence</th><td>{{ m.answer.confidence }}</td></tr>
{% if m.answer.evidence %}<tr><th>Measured</th><td>{{ m.answer.evidence }}</td></tr>{% endif %}
<tr><th>Would change</th><td>{{ m.answer.changes }}</td></tr>
</table>{% endif %}
{% if m.risks %}<h2>Main risks</h2><ul>{% for r in m.risks %}<li>{{ r }}</li>{% endfor %}</ul>{% endif %}
<h2>What to do next</h2><ol>{% for r in m.next %}<li>{{ r }}</li>{% endfor %}</ol>
{% if m.rows %}<h2>Expected change{% if m.baseline %} against {{ m.baseline }}{% endif %}</h2>
<div class="sub">{% if m.baseline_why %}The baseline is {{ m.baseline_why }}. {% endif %}Figures are
predictions at each layout's goodput; {{ m.error_note }}.</div>
<table><tr><th>figure</th><th>{{ m.baseline or "baseline" }}</th><th>{{ m.recommended }}</th><th>change</th><th>uncertainty</th></tr>
{% for r in m.rows %}<tr><td>{{ r.what }}</td><td class="num">{{ r.baseline }}</td><td class="num">{{ r.recommended }}</td>
<td class="num">{{ r.change }}</td><td>{{ r.uncertainty }}</td></tr>{% endfor %}</table>{% endif %}
</section>

<h2>1. The evidence</h2>
<p>Prompt:output tokens {{ ratio }}; the prefill share of tokens moves between {{ share_lo }} and {{ share_hi }}
(10th-90th percentile of {{ "%.0f"|format(ev.mix.summary.bucket_s) }} s buckets);
{{ ev.mix.change_points_s|length }} change point(s).</p>
{{ plots.mix }}{{ plots.lengths }}
{% if reasons %}<p>Why, from the recommendation:</p><ul>{% for r in reasons %}<li>{{ r }}</li>{% endfor %}</ul>{% endif %}
<h3>GPU counters in prefill-heavy and decode-heavy periods</h3>
{% if counters %}<table><tr><th>counter</th><th>prefill-heavy</th><th>decode-heavy</th></tr>
{% for r in counters %}<tr><td>{{ r.metric }}</td><td class="num">{{ r.pre }}</td><td class="num">{{ r.dec }}</td></tr>{% endfor %}</table>
{% else %}<p class="missing">No GPU counters beside served requests in this store.</p>{% endif %}
<h3>Measured interference</h3>
{% if ev.interference %}<p>A decode step took {{ "%.1f"|format(ev.interference.decode_alone_s * 1000) }} ms alone and
{{ "%.1f"|format(ev.interference.decode_with_prefill_s * 1000) }} ms with a prefill in it (median of
{{ ev.interference.num_alone }} and {{ ev.interference.num_mixed }} steps; {{ "%.1f"|format(ev.interference.slowdown) }}x):
every prefill stalls the decodes that share its step. This is what splitting removes.</p>
{% elif ev.num_steps %}<p class="missing">The store's {{ ev.num_steps }} engine steps hold too few decode steps
both alone and with a prefill in them (5 of each) to measure interference from.</p>
{% else %}<p class="missing">No engine steps in this store to measure interference from.</p>{% endif %}

<h2>2. The forecast and what it means</h2>
{% if ev.forecast %}<p>Models chosen by backtest: {% for k, v in ev.forecast.models.items() %}{{ k }}: {{ v }}{% if not loop.last %}, {% endif %}{% endfor %}.</p>
{{ plots.forecast }}
{% for line in outlook %}<p>{{ line }}</p>{% endfor %}
{% else %}<p class="missing">No forecast stored for this workload.</p>{% endif %}

<h2>3. The options</h2>
{% if cands %}<table><tr><th>#</th><th>candidate</th><th>goodput/device</th><th>TTFT p99</th><th>TBT p99</th>
<th>SLO met</th><th>$/M output tokens</th></tr>
{% for c in cands %}<tr><td>{{ loop.index }}</td><td>{{ c.label }}</td><td class="num">{{ c.goodput }}</td><td class="num">{{ c.ttft }}</td>
<td class="num">{{ c.tbt }}</td><td class="num">{{ c.att }}</td><td class="num">{{ c.cost }}</td></tr>{% endfor %}</table>
<p>Figures at each candidate's goodput (the highest request rate per device at which the SLO holds).</p>
{{ plots.options }}
{% else %}<p class="missing">No candidates: no recommendation stored.</p>{% endif %}

<h2>4. How far predictions were from measurements</h2>
{% if vrows %}<p>Last validate run: best measured <b>{{ ev.validation.best_measured }}</b>, best predicted
<b>{{ ev.validation.best_predicted }}</b>.
{% if ev.validation.best_measured == ev.validation.best_predicted %}The model picked the layout the measurement picked.
{% else %}The model and the measurement disagree on the best layout: treat the ranking as uncertain.{% endif %}</p>
<table><tr><th>layout</th><th>metric</th><th>predicted</th><th>measured</th><th>error</th></tr>
{% for r in vrows %}<tr><td>{{ r.layout }}</td><td>{{ r.metric }}</td><td class="num">{{ r.predicted }}</td>
<td class="num">{{ r.measured }}</td><td class="num">{{ r.error }}</td></tr>{% endfor %}</table>
{{ plots.validate }}
{% else %}<p class="missing">No validate run stored for this workload: the model's error here is unknown.</p>{% endif %}

<h2>5. Method, assumptions and provenance</h2>
<ul><li>Candidates are simulated with the scheduler the reference server runs and a cost model fitted to the
profile{% if profile_note %} ({{ profile_note }}){% endif %}; goodput is searched on the arrival-rate scale (DistServe's definition).</li>
<li>SLO: {{ slo }}.</li>
<li>Host: {{ p.host }}; store: {{ p.store }}; written {{ p.written_utc }}; gpuprobe {{ p.gpuprobe_version }}.</li>
<li>Workload: {{ p.workload }} ({{ p.trace_source or "stored" }}), {{ p.requests }} requests over
{{ "%.0f"|format(p.span_s) }} s. License: {{ p.license }}.</li></ul>

<h2>6. Details: the commands</h2>
<p>What the first page says in words, as commands to run (each prints what it did).</p>
<ul>{% for c in m.commands %}<li><code>{{ c }}</code></li>{% endfor %}</ul>
</body></html>"""


def _interactive(fig, first: list) -> str:
    out = fig.to_html(full_html=False, include_plotlyjs=not first, config={"displaylogo": False})
    first.append(True)
    return f'<div class="plot">{out}</div>'


def _static(figs: dict) -> dict[str, str]:
    """Every plot as an <img> of its PNG, drawn in one kaleido session (one browser start);
    tried twice, as a browser start on a loaded machine can lose a race in kaleido's page."""
    names = list(figs)
    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(tmp) / f"{n}.png" for n in names]
        for attempt in (1, 2):
            try:
                pio.write_images([figs[n] for n in names], paths, format="png", width=900,
                                 height=[int(figs[n].layout.height or 330) for n in names], scale=1.5)
                # on a loaded machine kaleido has also returned without writing (seen in the demo)
                missing = [p.name for p in paths if not p.exists()]
                if not missing:
                    break
                why = f"kaleido returned without writing {', '.join(missing)}"
            except Exception as exc:  # noqa: BLE001 - kaleido raises its own and the browser's
                why = one_line(str(exc))[:200]
            if attempt == 2:
                raise GpuprobeError(f"could not draw the report's plots as images (kaleido with "
                                    f"chromium): {why}") from None
        return {n: f'<div class="plot"><img alt="{html.escape(figs[n].layout.title.text or "")}" '
                   f'src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}"></div>'
                for n, p in zip(names, paths)}


def render(ev: dict, interactive: bool = True) -> str:
    m = memo(ev)
    figs = all_figures(ev)
    first: list = []
    drawn = {k: _interactive(f, first) for k, f in figs.items()} if interactive else _static(figs)
    plots = {k: drawn.get(k, "") for k in ("mix", "lengths", "options", "forecast", "validate")}
    rec = ev["recommendation"]
    s = ev["mix"]["summary"]
    share = ev["mix"]["buckets"]["prefill_token_share"].dropna()
    env = jinja2.Environment(autoescape=True)
    env.filters["code"] = _code
    return env.from_string(TEMPLATE).render(
        ev=ev, m=m, p=ev["provenance"], css=CSS, plots={k: jinja2.utils.markupsafe.Markup(v) for k, v in plots.items()},
        ratio=f"{s['prompt_output_ratio']:.1f} : 1" if s.get("prompt_output_ratio") else "n/a",
        share_lo=f"{share.quantile(0.1):.2f}" if len(share) else "n/a",
        share_hi=f"{share.quantile(0.9):.2f}" if len(share) else "n/a",
        reasons=[r.get("text", "") for r in rec.reasons] if rec else [],
        counters=_counters(ev["counters"]), outlook=((rec.forecast if rec else None) or {}).get("lines") or [],
        cands=_cands(list(rec.candidates) if rec else [], ev, m),
        vrows=_vrows(ev["validation"]), slo=_slo(rec), profile_note=_profile_note(rec))


def _code(text: str):
    """`command` spans as <code>, the rest escaped."""
    parts = html.escape(text).split("`")
    return jinja2.utils.markupsafe.Markup("".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts)))


def _counters(df) -> list[dict]:
    if df is None:
        return []
    return [{"metric": r.metric, "pre": f"{r._2:.1f}", "dec": f"{r._3:.1f}"} for r in df.itertuples()]


def _cands(cands: list, ev: dict, m: dict) -> list[dict]:
    from gpuprobe.report.memo import _fmt, priced
    rec = ev["recommendation"]
    price = ev.get("cost_per_device_hour")
    mean_out = float(np.mean(ev["lengths"]["output"]))
    out = []
    for c in cands:
        a = c.get("at_goodput") or {}
        cost = priced(c, price, rec, mean_out)
        goodput = _fmt(c.get("max_goodput_rps_per_device"), "req/s")
        out.append({"label": c.get("label", c.get("layout")),
                    "goodput": (">= " if c.get("capped") else "") + goodput,  # the workload's limit, not the layout's
                    "ttft": _fmt(a.get("ttft_p99_s"), "s"), "tbt": _fmt(a.get("tbt_p99_s"), "s"),
                    "att": f"{a['slo_attainment']:.0%}" if a.get("slo_attainment") is not None else "n/a",
                    "cost": _fmt(cost, "$")})
    return out


def _vrows(v: dict | None) -> list[dict]:
    if not v:
        return []
    out = []
    for r in (v.get("body") or {}).get("rows") or []:
        if not str(r.get("metric", "")).endswith(("_p50_s", "_p99_s")):
            continue
        e = r.get("rel_error")
        out.append({"layout": r.get("layout"), "metric": r.get("metric"), "predicted": _ms(r.get("predicted")),
                    "measured": _ms(r.get("measured")), "error": f"{e:+.0%}" if e is not None else "n/a"})
    return out


def _ms(v) -> str:
    return "n/a" if v is None else f"{float(v) * 1000:.1f} ms"


def _slo(rec) -> str:
    if rec is None:
        return "not recorded (no recommendation)"
    return f"{rec.slo.name}: {rec.slo.describe()}"  # TTFT, TPOT and ITL as the SLO names them


def _profile_note(rec) -> str:
    meta = (rec.profile.get("meta") or {}) if rec else {}
    return ", ".join(f"{k} {v}" for k, v in meta.items() if k in ("model", "source", "device", "spec", "target"))
