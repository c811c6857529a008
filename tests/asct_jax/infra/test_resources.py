"""asct_jax.infra.resources: what a run costs the machine."""
import os

import pytest

from tests.helpers import REPO_ROOT


@pytest.mark.slow      # two subprocesses, one holding 1 GiB (the slow tier's)
def test_peak_rss_is_the_process_own_not_its_parent():
    """A small child of a large parent reports its own peak: ru_maxrss would start at the
    parent's (Linux keeps the high-water mark across fork + exec), VmHWM does not."""
    import subprocess
    import sys
    code = ("import numpy as np, subprocess, sys\n"
            "a = np.ones(2**30 // 8); a[:] = 2\n"   # the parent holds 1 GiB
            "child = 'from asct_jax.infra.resources import peak_rss_bytes; "
            "print(peak_rss_bytes())'\n"
            "print(subprocess.run([sys.executable, '-c', child], capture_output=True, "
            "text=True, check=True).stdout)\n")
    root = REPO_ROOT
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=root, check=True, env={**os.environ, "PYTHONPATH": root})
    assert int(out.stdout.split()[-1]) < 2**29   # jax imported: ~0.2 GB
