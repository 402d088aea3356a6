"""The I/O shell: Kafka loop, routing, commit protocol, and the embedded broker."""
