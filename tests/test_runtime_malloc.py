"""`tagalign.runtime.cap_malloc_arenas`: glibc's mallopt is reached (a serving process
caps its malloc arenas: why in the function's docstring)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_malloc_arenas_are_capped_in_a_fresh_process():
    # a fresh process: the cap holds for the rest of the process it is set in
    code = ("from tagalign.runtime import cap_malloc_arenas; "
            "print(cap_malloc_arenas(2), cap_malloc_arenas(0) in (True, False))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert out == ["True", "True"]
