"""`busguard kinds`: the kinds this installation guards, and where each is from.

The registry is what every process reads (busguard.policies): an operator
checks here that a kind installed from its own package was picked up, with
the config section it reads and the reasons it may give.
"""

from __future__ import annotations

import argparse
import json

from busguard.policies import KINDS, PLUGIN_KINDS, KindSpec


def describe(spec: KindSpec) -> dict[str, object]:
    return {
        "kind": spec.kind,
        "origin": "plugin" if spec.kind in PLUGIN_KINDS else "built-in",
        "policy": None if spec.policy is None else f"{type(spec.policy).__module__}.{type(spec.policy).__qualname__}",
        "task_index": spec.task_index,
        "single_witness": spec.single_witness,
        "witness": spec.witness_rule,
        "witness_key": list(spec.witness_key),
        "settings_section": spec.section if spec.settings is not None else None,
        "reasons": list(spec.reasons),
        "routes": list(spec.routes),
        "resolutions": list(spec.reconciliation.choices) if spec.reconciliation is not None else [],
    }


def cmd_kinds(args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps([describe(spec) for spec in KINDS.values()], indent=2))
        return 0
    width = max(map(len, KINDS))
    for spec in KINDS.values():
        r = describe(spec)
        traits = [str(r["origin"])]
        traits += [] if spec.task_index else ["task index off"]
        traits += [f"witness: {spec.describe_witness()}"]
        traits += [f"[{spec.section}]"] if spec.settings is not None else []
        traits += [f"routes {', '.join(spec.routes)}"] if spec.routes else []
        traits += [f"resolutions {', '.join(spec.reconciliation.choices)}"] if spec.reconciliation is not None else []
        print(f"{spec.kind.ljust(width)}  {r['policy'] or 'no policy'}  ({'; '.join(traits)})")
    return 0
