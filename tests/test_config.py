from __future__ import annotations

import dataclasses
import json

import pytest

from modeldir.config import CONFIG_FORMAT, ModelConfig, load_config, save_config

from .parity_configs import EMBEDDING_CONFIGS, SEQ2SEQ_CONFIGS


@pytest.mark.parametrize("config", [*SEQ2SEQ_CONFIGS.values(), *EMBEDDING_CONFIGS.values()])
def test_config_json_round_trip(tmp_path, config):
    save_config(config, tmp_path, "m")
    assert json.loads((tmp_path / "config.json").read_text())["format"] == CONFIG_FORMAT
    assert load_config(tmp_path) == ("m", config)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(d_model=50, n_heads=4), "not a multiple of n_heads"),
        (dict(n_decoder_layers=0), "needs n_decoder_layers"),
        (dict(task="classification"), "task must be"),
        (dict(max_input_tokens=2000), "exceeds max_positions"),
        (dict(d_model=12, n_heads=1, d_ff=8), "d_head .* a multiple of 8, not 12"),
    ],
)
def test_invalid_configs_are_refused(change, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(SEQ2SEQ_CONFIGS["h1-d8-post"], **change)


def test_unknown_fields_are_refused():
    data = SEQ2SEQ_CONFIGS["h1-d8-post"].to_dict() | {"rotary": True}
    with pytest.raises(ValueError, match="unknown ModelConfig fields: rotary"):
        ModelConfig.from_dict(data)
