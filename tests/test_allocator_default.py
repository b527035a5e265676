"""The package sets torch's CUDA allocator to growable segments unless the operator chose settings."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SHOW = "import worker, os; print(os.environ.get('PYTORCH_CUDA_ALLOC_CONF'), os.environ.get('PYTORCH_ALLOC_CONF'))"


@pytest.mark.parametrize(("given", "seen"), [
    ({}, "expandable_segments:True None"),
    ({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"}, "max_split_size_mb:512 None"),
    ({"PYTORCH_ALLOC_CONF": "expandable_segments:False"}, "None expandable_segments:False"),
])
def test_importing_the_package_sets_growable_segments_unless_the_operator_chose(given, seen):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")}
    out = subprocess.run([sys.executable, "-c", SHOW], env=env | given, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == seen
