"""``jetlog bench``: jetlog and nats-server -js measured side by side with the same client."""
