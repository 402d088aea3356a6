"""Invariant 6: the log is complete, as the guards' batch-seal chains prove.

Each guard process signs one tree head per batch, chained to the one before
(docs/protocol.md 12.6): a fork, a gap, a broken link or a leaf no audit
record proves means records were forged, removed or lost. Pure.
"""

from __future__ import annotations

from typing import Final, Protocol

from busguard.audit.findings import ChainReport
from busguard.audit.ledger import Ledger

#: leaf indices and seq ranges a detail lists before "…"
_SHOWN: Final = 8


class Flag(Protocol):
    def __call__(self, code: str, detail: str) -> None: ...


def chain_reports(led: Ledger, flag: Flag) -> list[ChainReport]:
    """Every chain's report, flagging forks, gaps, broken links, missing leaves and bad inclusions."""
    for sha, why in sorted(led.bad_inclusions.items()):
        flag("bad_inclusion", f"audit record sha256 {sha[:16]}… is not proven by its tree head (excluded from the lineage): {why}")
    out = []
    for _, c in sorted(led.chains.items()):
        label = f"chain {c.chain} of {c.guard}"
        seqs = sorted(c.heads)
        for seq in seqs:
            if len(c.heads[seq]) > 1:
                shas = ", ".join(h.sha256[:16] + "…" for h in c.heads[seq])
                flag("chain_fork", f"{label} has {len(c.heads[seq])} different signed heads at seq {seq}: {shas}")
        missing = sorted(set(range(seqs[-1] + 1)) - set(seqs))
        if missing:
            flag("chain_gap", f"{label} lacks {len(missing)} head(s) before its tip {seqs[-1]}: seq {_runs(missing)}")
        for seq in seqs:
            before = c.heads.get(seq - 1)
            for h in c.heads[seq]:
                if before is not None and h.prev not in {b.sha256 for b in before}:
                    flag("chain_broken", f"{label}: head {seq} names previous head {h.prev}, not {before[0].sha256}")
                gone = h.missing()
                if gone:
                    shown = ", ".join(map(str, gone[:_SHOWN])) + (", …" if len(gone) > _SHOWN else "")
                    flag(
                        "leaf_missing",
                        f"{label}: head {seq} covers {h.size} records, {len(gone)} of them not in the audit log (leaves {shown})",
                    )
        tip = c.heads[seqs[-1]][0]
        out.append(
            ChainReport(
                guard=c.guard,
                chain=c.chain,
                heads=sum(len(hs) for hs in c.heads.values()),
                leaves=sum(h.size for hs in c.heads.values() for h in hs),
                first_seq=seqs[0],
                tip_seq=seqs[-1],
                tip_sha256=tip.sha256,
                tip_sealed_at=tip.sealed_at,
            )
        )
    return out


def _runs(numbers: list[int]) -> str:
    """Sorted integers as ranges: 0-3, 7, 9-10."""
    parts: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ", ".join(parts[:_SHOWN]) + (", …" if len(parts) > _SHOWN else "")
