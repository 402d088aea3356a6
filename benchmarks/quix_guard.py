"""The Quix Streams guard busguard is compared with (issue 20): what a user
who picks a stateful stream processor instead of busguard would build for
replay protection, kept whole here so readers can judge the comparison.

Per record it does the hand-written guard's checks (benchmarks/naive_guard.py:
the payload hash and the Ed25519 signature over the receipt bytes,
docs/protocol.md §3) and then, unless --stateless, looks the receipt's nonce
up in Quix's RocksDB state (per message key, i.e. per sender), drops the
record if the nonce is there (a replay) and records it otherwise, with a TTL
of --nonce-ttl-ms (busguard's nonce retention in the same benchmark). The
state has its changelog topic, and processing is at-least-once: the
durability a Quix user gets by default. No freshness, no task index, no
decision record, no dead-letter or audit output. One process, Quix's own
single-threaded loop over confluent-kafka.

    python benchmarks/quix_guard.py [--stateless] BOOTSTRAP GROUP KEYS.json STATE_DIR IN=OUT [IN=OUT ...]

KEYS.json maps sender id to hex Ed25519 public key. Stops on SIGTERM (Quix's
own handler) and prints {"dropped": invalid, "replays": replays} as JSON.
$FETCH_MAX_WAIT_MS sets the consumer's long poll (fetch.wait.max.ms; default
librdkafka's 500 ms), as for the relay and the hand-written guard.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import logging
import os
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

import nacl.bindings
import nacl.exceptions
from quixstreams import Application, State
from quixstreams.models.topics import Topic, TopicConfig
from quixstreams.models.topics.manager import TopicManager

CONTEXT = b"busguard/receipt/v1\x00"  # the signature covers CONTEXT || receipt bytes
#: What tansu keeps: every record, for as long as it runs (docs/notes-broker.md).
TANSU_RETENTION_MS = "-1"


class TansuTopicManager(TopicManager):
    """Quix derives a changelog topic's config from its input topics'
    `retention.ms`, which tansu leaves out of DescribeConfigs, so without
    this the first stateful dataframe fails with KeyError: 'retention.ms'
    (docs/notes-broker.md, "Quix Streams on tansu"). A missing value is
    taken as tansu's real retention: unlimited."""

    @classmethod
    def derive_topic_config(cls, topics: Iterable[Topic]) -> TopicConfig:
        patched = []
        for t in topics:
            extra = t.broker_config.extra_config
            if "retention.ms" not in extra:
                clone = Topic(name=t.name)
                clone.broker_config = TopicConfig(
                    num_partitions=t.broker_config.num_partitions,
                    replication_factor=t.broker_config.replication_factor,
                    extra_config={**extra, "retention.ms": TANSU_RETENTION_MS},
                )
                t = clone
            patched.append(t)
        return super().derive_topic_config(patched)


class Verifier:
    """The hand-written guard's checks, record for record, so the two
    contenders differ only in what Quix adds (state, changelog, its loop)."""

    def __init__(self, keys: dict[str, bytes]) -> None:
        self.keys = keys
        self.dropped = 0

    def nonce(self, value: bytes, headers: Any) -> str | None:
        """The receipt's nonce if the record verifies, else None (counted)."""
        h = dict(headers or ())
        try:
            raw = h["busguard-receipt"]
            receipt = json.loads(raw)
            if hashlib.sha256(value).hexdigest() != receipt["payload_hash"]:
                raise ValueError("payload hash")
            sig = base64.urlsafe_b64decode(h["busguard-signature"] + b"==")
            nacl.bindings.crypto_sign_open(sig + CONTEXT + raw, self.keys[receipt["sender"]])
            nonce = receipt["nonce"]
            if not isinstance(nonce, str):
                raise TypeError("nonce")
            return nonce
        except (KeyError, TypeError, ValueError, nacl.exceptions.CryptoError):
            self.dropped += 1
            return None


def build(app: Application, routes: dict[str, str], verifier: Verifier, stateless: bool, ttl: timedelta) -> dict[str, int]:
    """One dataframe per input topic (each its own state store and changelog
    topic), raw bytes in and out, headers forwarded as they came."""
    replays = {"replays": 0}

    def verified(value: bytes, key: Any, timestamp: int, headers: Any) -> bool:
        return verifier.nonce(value, headers) is not None

    def fresh(value: bytes, key: Any, timestamp: int, headers: Any, state: State) -> bool:
        nonce = verifier.nonce(value, headers)
        if nonce is None:
            return False
        if state.exists(nonce):
            replays["replays"] += 1
            return False
        state.set(nonce, 1, ttl=ttl)  # type: ignore[call-arg]  # State.set takes ttl since 3.28
        return True

    for src, dst in routes.items():
        in_topic = app.topic(src, key_deserializer="bytes", value_deserializer="bytes")
        out_topic = app.topic(dst, key_serializer="bytes", value_serializer="bytes")
        sdf = app.dataframe(in_topic)
        if stateless:
            sdf = sdf.filter(verified, metadata=True)
        else:
            sdf = sdf.filter(fresh, stateful=True, metadata=True)
        sdf.to_topic(out_topic)
    return replays


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--stateless", action="store_true", help="verify and forward only: no nonce state")
    p.add_argument(
        "--nonce-ttl-ms",
        type=int,
        default=3_660_000,
        help="how long a recorded nonce is kept (default 1 h + 60 s, compare.py's busguard nonce retention)",
    )
    p.add_argument("--stock-topic-manager", action="store_true", help="Quix's own TopicManager, without the tansu fix (shows the quirk)")
    p.add_argument("bootstrap")
    p.add_argument("group")
    p.add_argument("keys")
    p.add_argument("state_dir")
    p.add_argument("routes", nargs="+", metavar="IN=OUT")
    args = p.parse_args(argv)
    with open(args.keys) as f:
        keys = {agent: bytes.fromhex(pk) for agent, pk in json.load(f).items()}
    routes = dict(pair.split("=", 1) for pair in args.routes)
    consumer: dict[str, Any] = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    if os.environ.get("FETCH_MAX_WAIT_MS"):
        consumer["fetch.wait.max.ms"] = int(os.environ["FETCH_MAX_WAIT_MS"])
    app = Application(
        broker_address=args.bootstrap,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        state_dir=args.state_dir,
        processing_guarantee="at-least-once",
        use_changelog_topics=not args.stateless,
        consumer_extra_config=consumer,
        loglevel=logging.WARNING,
        topic_manager=None if args.stock_topic_manager else _tansu_topic_manager(args.bootstrap, args.group),
    )
    verifier = Verifier(keys)
    replays = build(app, routes, verifier, args.stateless, timedelta(milliseconds=args.nonce_ttl_ms))
    app.run()
    print(json.dumps({"dropped": verifier.dropped, **replays}), flush=True)


def _tansu_topic_manager(bootstrap: str, group: str) -> TopicManager:
    from quixstreams.models.topics.admin import TopicAdmin

    return TansuTopicManager(topic_admin=TopicAdmin(broker_address=bootstrap), consumer_group=group)


if __name__ == "__main__":
    main()
