"""``python -m jetlog`` = the ``jetlog`` command."""

from jetlog.cli import main

main()
