"""Model loading without transformers' "Loading weights" progress bar.

Loading a packaged model is instant and local, so a bar on every memory's open is noise in a
user's logs and notebooks. The switch is transformers' global one: it is turned off for the load
only and left as the user had it.
"""

from __future__ import annotations

import contextlib
from typing import Iterator


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()
