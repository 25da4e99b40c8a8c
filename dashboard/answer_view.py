"""The answer as the Overview and Recommend pages show it: the decision sentence, then its
parts (margin over the best other layout, SLO, confidence and why, cost, the workload slice),
the evidence, the assumed figures and a drift warning. One function, so both pages say the
same thing, in the words gpuprobe.decide.answer writes for the CLI and the report."""
from __future__ import annotations

import streamlit as st


def md(text: str) -> str:
    """Plain text safe for st.markdown: `$` would start LaTeX, `*` and `_` emphasis."""
    return text.replace("\\", "\\\\").replace("$", "\\$").replace("*", "\\*").replace("_", "\\_")


def show_answer(info: dict, compact: bool = False) -> None:
    """info: queries.answer's {rec, answer, drift}. compact: the Overview's shorter form."""
    rec, a = info["rec"], info["answer"]
    if info.get("drift"):
        st.warning(info["drift"])
    st.markdown(f'<div data-testid="gpuprobe-decision">{_html(a.decision)}</div>',
                unsafe_allow_html=True)
    c = st.columns(4)
    gp = rec.max_goodput_rps_per_device
    c[0].metric("Goodput per device", (f"{'>= ' if a.goodput.startswith('at least') else ''}{gp:.3g} req/s"
                                       if gp is not None else "n/a"))
    m = a.margin_value
    c[1].metric("Margin over the best other layout", f"{m:+.0%}" if m is not None else "n/a",
                help=a.margin)
    c[2].metric("Confidence", rec.confidence.word or "n/a", help=a.confidence)
    cost = rec.cost_per_million_output_tokens
    c[3].metric("$ per million output tokens", f"${cost:.3g}" if cost is not None else "n/a",
                help=a.cost)
    lines = [("Margin", a.margin), ("SLO", a.slo), ("Confidence", a.confidence), ("Cost", a.cost),
             ("Decided on", a.workload)]
    if not compact:
        lines += [("What would change it", a.changes), ("Main risk", a.risk), ("Next", a.next_step)]
    st.markdown("\n".join(f"- **{k}:** {md(v)}" for k, v in lines))
    if a.evidence:
        (st.warning if a.agrees is False else st.info)(f"Evidence: {a.evidence}.")
    for cav in a.caveats:
        st.caption(f"Not measured: {md(cav)}.")


def _html(text: str) -> str:
    import html
    # &#36;: a bare $ would still start LaTeX in Streamlit's markdown
    return f'<p style="font-size:1.15rem">{html.escape(text).replace("$", "&#36;")}</p>'
