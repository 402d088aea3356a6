"""Development tools: the embedded broker (tansu), Apache Kafka on loopback, the guard-process kit. Never imported by the production runtime."""
