"""Peak memory growth of busguard's fetch decoder on one bomb per codec.

    python -m tests.fuzz.bomb_memory [--inflated-mib 256] [--busguard-root PATH]

Builds, per codec (gzip, snappy, lz4, zstd), one valid record batch whose
records inflate to `--inflated-mib` MiB (snappy also: a raw section whose
length header claims 4 GiB), then decodes each in a fresh interpreter
through aiokafka's fetcher with busguard's tolerant hook, exactly as a
busguard consumer does, and prints how far the process's peak RSS (VmHWM)
rose during the decode and what the decoder yielded. `--busguard-root`
decodes with another checkout's busguard (e.g. main, to measure before a
fix); the bombs are built here either way.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.fuzz.batches import CODECS, batch, bomb_batch, bomb_inflated_size, snappy_length_lie

_DECODE = r"""
import sys
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
raw = open(sys.argv[1], "rb").read()
from aiokafka.consumer import fetcher
from aiokafka.structs import TopicPartition
from busguard.runtime.tolerant_fetch import RAW_KEYS, consumer_options
consumer_options()
before = hwm()
try:
    items = list(fetcher.PartitionRecords(TopicPartition("t", 0), fetcher.MemoryRecords(raw), None, 0, RAW_KEYS, None, True, 0))
    got = ", ".join(sorted({getattr(i, "reason", "record") for i in items})) + f" ({len(items)} item(s))"
except BaseException as exc:
    got = f"raised {type(exc).__name__}: {str(exc)[:80]}"
print(f"{(hwm() - before) / 2**20:.1f}\t{got}")
"""


def bombs(inflated_mib: int) -> dict[str, bytes]:
    value = inflated_mib * 2**20 - 16
    out = {name: bomb_batch(code, value) for name, code in CODECS.items() if code}
    out["snappy-length-lie"] = batch([], payload=snappy_length_lie(), count=1, last_offset_delta=0, attributes=CODECS["snappy"])
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--inflated-mib", type=int, default=256)
    p.add_argument("--busguard-root", type=Path, default=Path(__file__).resolve().parents[2])
    args = p.parse_args(argv)
    print(f"busguard from {args.busguard_root}; bombs inflate to {bomb_inflated_size(args.inflated_mib * 2**20 - 16)} bytes")
    print("bomb\tcompressed batch bytes\tpeak RSS growth MiB\tdecoded as")
    with tempfile.TemporaryDirectory() as tmp:
        for name, raw in bombs(args.inflated_mib).items():
            path = Path(tmp) / name
            path.write_bytes(raw)
            run = subprocess.run(
                [sys.executable, "-c", _DECODE, str(path)], cwd=args.busguard_root, capture_output=True, text=True, timeout=600
            )
            line = run.stdout.strip() or f"?\tprocess died (exit {run.returncode}): {run.stderr.strip()[-120:]}"
            print(f"{name}\t{len(raw)}\t{line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
