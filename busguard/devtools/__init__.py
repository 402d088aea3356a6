"""Development tools: the embedded broker. Never imported by the production runtime."""
