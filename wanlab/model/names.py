"""The one name rule: what a user may call an experiment, node, link, LAN or agent.

As in Emulab: a letter, then letters, digits or '-', at most :data:`NAME_MAX`
characters. Experiment names become folder and lock file names, so every
entry point (CLI, API, ``ExperimentBuilder``, YAML, the store and the life
cycle) checks them with :func:`check_experiment_name` before anything touches
the filesystem; no other spelling ever reaches a path.
"""

from __future__ import annotations

import re

from wanlab.errors import WanlabError

NAME_MAX = 32
NAME_RE = re.compile(rf"[A-Za-z][A-Za-z0-9-]{{0,{NAME_MAX - 1}}}")
NAME_RULE = f"a letter, then letters, digits or '-', at most {NAME_MAX}"


def is_valid(name: object) -> bool:
    return isinstance(name, str) and NAME_RE.fullmatch(name) is not None


def check_experiment_name(name: object) -> str:
    """Return ``name`` if it is a valid experiment name, else raise a one-line error."""
    if not is_valid(name):
        shown = repr(name) if len(repr(name)) <= 60 else repr(name)[:57] + "..."
        raise WanlabError(f"experiment name {shown} is not a valid name ({NAME_RULE})")
    return name  # type: ignore[return-value]


# Node image names (``wanlab image``) become file names in the image store; Debian-like
IMAGE_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")
IMAGE_NAME_RULE = ("1-63 characters: lower-case letters, digits, '.', '_' or '-', starting "
                   "with a letter or digit")


def check_image_name(name: object) -> str:
    """Return ``name`` if it is a valid image name, else raise a one-line error."""
    if not isinstance(name, str) or IMAGE_NAME_RE.fullmatch(name) is None:
        shown = repr(name) if len(repr(name)) <= 60 else repr(name)[:57] + "..."
        raise WanlabError(f"image name {shown} is not valid ({IMAGE_NAME_RULE})")
    return name
