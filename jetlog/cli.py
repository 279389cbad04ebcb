"""Command line entry point (filled in by the node work)."""


def main() -> None:
    """Entry point of the ``jetlog`` console script."""
    raise SystemExit("not yet")
