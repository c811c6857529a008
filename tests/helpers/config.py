"""Stable JSON text of a config (was asct_jax.infra.config_cli.config_to_json, which only
the tests used; the runs write config.json through config_cli.config_to_dict)."""
import json
from typing import Any

from asct_jax.infra.config_cli import config_to_dict


def config_to_json(config: Any, indent: int = 2) -> str:
    """Stable JSON text of a config (sorted keys), for config.json."""
    return json.dumps(config_to_dict(config), indent=indent, sort_keys=True) + "\n"
