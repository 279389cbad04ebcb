"""The CRC32C seam (``jetlog.wire.crc``): the package's own C function, loaded without the
package's start-up metadata lookup."""

from __future__ import annotations

import os
import subprocess
import sys

import crc32c as package
from hypothesis import given
from hypothesis import strategies as st

from jetlog.wire.crc import crc32c


def test_the_check_value_and_continuation() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert crc32c(b"6789", crc32c(b"12345")) == 0xE3069283
    assert crc32c(memoryview(bytearray(b"123456789"))) == 0xE3069283


@given(st.binary(max_size=4096), st.integers(0, 2**32 - 1))
def test_same_as_the_package(data: bytes, start: int) -> None:
    assert crc32c(data, start) == package.crc32c(data, start)


def test_loading_it_reads_no_distribution_metadata() -> None:
    """The point of the seam: a fresh interpreter (a node starting, a Spark worker planning a
    query) gets the function without importing ``importlib.metadata`` or the package."""
    code = (
        "import sys\n"
        "from jetlog.wire.crc import crc32c\n"
        "assert crc32c(b'123456789') == 0xE3069283\n"
        "print(sorted(m for m in ('importlib.metadata', 'crc32c', 'crc32c._crc32c') if m in sys.modules))\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=root, check=True
    ).stdout
    assert out.strip() == "['crc32c._crc32c']"
