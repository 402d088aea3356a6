"""Readable renderings of a verdict: text, JSON, Mermaid and Graphviz DOT.

A refusal is never drawn as a graph, in any format: the pictures of a
refusal show the unknowable nodes as unconnected boxes, because any edge
drawn through them would be the fabricated graph the seed warns about.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from busguard.policies.taint.plan import Finding, ReplayRefused, Result

Format = Literal["text", "json", "mermaid", "dot"]
FORMATS: Final[tuple[Format, ...]] = ("text", "json", "mermaid", "dot")


def render(result: Result, fmt: Format) -> str:
    if fmt == "json":
        return msgspec.json.encode(result).decode() + "\n"
    if fmt == "mermaid":
        return mermaid(result)
    if fmt == "dot":
        return dot(result)
    return text(result)


def _finding_line(f: Finding) -> str:
    tok = f" token {f.token}" if f.token is not None else ""
    return f"  [{f.condition}] {f.kind} {', '.join(f.nodes)}{tok}: {f.detail}"


def _some(ids: list[str], limit: int = 20) -> str:
    """A list for people: long ones are cut, saying how many were left out (the JSON has them all)."""
    if len(ids) <= limit:
        return ", ".join(ids)
    return ", ".join(ids[:limit]) + f", ... and {len(ids) - limit} more (--json lists all)"


def _scope(outputs: list[str]) -> str:
    return "the cone of " + _some(outputs)


def text(result: Result) -> str:
    lines: list[str] = []
    if isinstance(result, ReplayRefused):
        lines.append(f"REFUSED (condition {result.condition}): end-to-end replay of {_scope(result.outputs)} is refused")
        lines.append(f"  {result.reason}")
        lines.append(f"unknowable ({len(result.nodes)}): {', '.join(result.nodes)}")
        lines.append(f"conditions failing irrecoverably: {', '.join(map(str, result.conditions))}")
        lines.append("findings:")
        lines.extend(_finding_line(f) for f in result.findings)
        lines.append(f"suspect, every node of the cone ({len(result.suspect)}), none cleared: {_some(result.suspect, 50)}")
        lines.append("no taint graph: any graph drawn through the unknowable nodes would be fabricated; scope them by hand")
        return "\n".join(lines) + "\n"
    forced = f", forced by condition {', '.join(map(str, result.forced_by))}" if result.forced_by else ""
    lines.append(f"VALID: {result.unit}-level replay of {_scope(result.outputs)} ({len(result.nodes)} nodes, {result.edges} edges{forced})")
    lines.append("taint graph (predecessors first; every node is attributed, none is cleared):")
    for n in result.nodes:
        out = n.outcome + (" (ledger)" if n.outcome_from == "ledger" else "")
        tok = f"  token {n.token}" if n.token is not None else ""
        sinks = f"  sinks {', '.join(n.sinks)}" + (" (ledger)" if n.sinks_from == "ledger" else "") if n.sinks else ""
        preds = ", ".join(n.predecessors) or "-"
        lines.append(f"  {n.id}  [{n.role}]  {n.operation}  {out}{tok}{sinks}  <- {preds}")
    lines.append("sinks reached by the tainted cone:" if result.sinks else "sinks reached by the tainted cone: none recorded")
    for s in result.sinks:
        toks = f"  [token {', '.join(s.tokens)}]" if s.tokens else ""
        lines.append(f"  {s.sink}  <- {', '.join(s.nodes)}{toks}")
    if result.tokens:
        lines.append("tokens rebuilt from the ledger:")
        for t in result.tokens:
            effects = "; ".join(f"{e.id or '?'} {e.status} -> {', '.join(e.sinks) or '(no sink)'}" for e in t.effects)
            lines.append(f"  {t.token}: nodes {', '.join(t.nodes)}; effects {effects}")
    if result.findings:
        lines.append("findings (each resolved by the ledger):")
        lines.extend(_finding_line(f) for f in result.findings)
    return "\n".join(lines) + "\n"


def _mq(label: str) -> str:
    """A Mermaid quoted label: '#' (Mermaid's entity marker), quotes and angle brackets as entity codes."""
    escaped = label.replace("#", "#35;").replace("&", "#38;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")
    return '"' + escaped + '"'


def mermaid(result: Result) -> str:
    lines = ["flowchart LR"]
    if isinstance(result, ReplayRefused):
        lines.append(f"  subgraph refused[{_mq(f'replay refused (condition {result.condition}): outcomes unknowable, no graph')}]")
        lines.extend(f"    u{k}[{_mq(nid)}]:::unknowable" for k, nid in enumerate(result.nodes))
        lines.append("  end")
        lines.append("  classDef unknowable fill:#fdd,stroke:#c00,stroke-width:2px")
        return "\n".join(lines) + "\n"
    key = {n.id: f"n{k}" for k, n in enumerate(result.nodes)}
    sink_key = {s.sink: f"s{k}" for k, s in enumerate(result.sinks)}
    for n in result.nodes:
        label = f"{n.id}<br/>{n.operation} · {n.outcome}" + (" (ledger)" if n.outcome_from == "ledger" else "")
        if n.token is not None:
            label += f"<br/>token {n.token}"
        cls = "output" if n.role == "output" else ("aborted" if n.outcome == "abort" else "tainted")
        lines.append(f"  {key[n.id]}[{_mq(label).replace('#lt;br/#gt;', '<br/>')}]:::{cls}")
    for s in result.sinks:
        lines.append(f"  {sink_key[s.sink]}[({_mq(s.sink)})]:::sink")
    for n in result.nodes:
        lines.extend(f"  {key[p]} --> {key[n.id]}" for p in n.predecessors)
        arrow = "-. ledger .->" if n.sinks_from == "ledger" else "-.->"
        lines.extend(f"  {key[n.id]} {arrow} {sink_key[s]}" for s in n.sinks)
    lines.append("  classDef tainted fill:#ffe9b3,stroke:#b80")
    lines.append("  classDef output fill:#fbb,stroke:#c00,stroke-width:2px")
    lines.append("  classDef aborted fill:#ddd,stroke:#777")
    lines.append("  classDef sink fill:#dde8ff,stroke:#36c")
    return "\n".join(lines) + "\n"


def _dq(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def dot(result: Result) -> str:
    lines = ["digraph taint {", "  rankdir=LR;", "  node [shape=box, style=filled, fontname=Helvetica];"]
    if isinstance(result, ReplayRefused):
        lines.append("  subgraph cluster_refused {")
        lines.append(f"    label={_dq(f'replay refused (condition {result.condition}): outcomes unknowable, no graph')};")
        lines.extend(f'    {_dq("node:" + nid)} [label={_dq(nid)}, fillcolor="#ffdddd", color="#cc0000"];' for nid in result.nodes)
        lines.append("  }")
        lines.append("}")
        return "\n".join(lines) + "\n"
    for n in result.nodes:
        label = f"{n.id}\n{n.operation} · {n.outcome}" + (" (ledger)" if n.outcome_from == "ledger" else "")
        if n.token is not None:
            label += f"\ntoken {n.token}"
        fill = "#ffbbbb" if n.role == "output" else ("#dddddd" if n.outcome == "abort" else "#ffe9b3")
        style = ', style="filled,dashed"' if n.outcome_from == "ledger" else ""
        lines.append(f'  {_dq("node:" + n.id)} [label={_dq(label)}, fillcolor="{fill}"{style}];')
    for s in result.sinks:
        lines.append(f'  {_dq("sink:" + s.sink)} [label={_dq(s.sink)}, shape=cylinder, fillcolor="#dde8ff"];')
    for n in result.nodes:
        lines.extend(f"  {_dq('node:' + p)} -> {_dq('node:' + n.id)};" for p in n.predecessors)
        attrs = ' [style=dashed, label="ledger"]' if n.sinks_from == "ledger" else " [style=dashed]"
        lines.extend(f"  {_dq('node:' + n.id)} -> {_dq('sink:' + s)}{attrs};" for s in n.sinks)
    lines.append("}")
    return "\n".join(lines) + "\n"
