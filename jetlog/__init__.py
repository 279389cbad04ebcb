"""jetlog: durable, replicated JetStream-compatible streams beside an unmodified nats-server."""

__version__ = "0.1.0"
