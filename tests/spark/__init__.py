"""Spark connector tests (real nats-server, real jetlog, a local[2] SparkSession)."""
