"""workbench.methods.assemble: a training configuration's layers, each later one winning, in one pass."""

from __future__ import annotations

import pytest

from workbench import methods
from workbench.methods.assemble import assemble
from workbench.rl.sft import SFTConfig
from workbench.rl.train_config import TrainConfig
from workbench.util.paths import repo_root

SFT_ADAPTER = repo_root() / "data" / "adapters" / "search_r1-sft"  # its provenance: max_turns 4, 64 / 1536 tokens


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_each_later_layer_wins(tmp_path):
    file = write(tmp_path / "run.yaml", "reward: dynasearcher\nsteps: 7\n")
    reward = write(tmp_path / "reward.yaml", "reward: r1_searcher\n")
    assert assemble(method="search_r1", log=None).reward == "search_r1"  # (1) the method's declaration
    assert assemble(method="search_r1", config_file=file, log=None).reward == "dynasearcher"  # (2) the file
    cfg = assemble(method="search_r1", config_file=file, reward_file=reward, log=None)  # (3) the reward file
    assert (cfg.reward, cfg.steps, cfg.method) == ("r1_searcher", 7, "search_r1")
    cfg = assemble(method="search_r1", config_file=file, reward_file=reward, flags={"reward": "dspo"}, log=None)
    assert cfg.reward == "dspo" and cfg.steps == 7  # (4) the flags


def test_an_empty_flag_is_not_given_unless_it_clears_the_files_field(tmp_path):
    file = write(tmp_path / "run.yaml", f"init_adapter: {tmp_path / 'not-yet'}\n")
    cfg = assemble(method="search_r1", flags={"reward": "", "model": None, "question_types": [], "reward_params": {}},
                   log=None)
    assert (cfg.reward, cfg.model, cfg.question_types) == ("search_r1", TrainConfig.model, None)
    assert assemble(config_file=file, log=None).init_adapter == str(tmp_path / "not-yet")
    assert assemble(config_file=file, flags={"init_adapter": ""}, log=None).init_adapter == ""


def test_the_files_method_key_picks_the_method_unless_one_is_given(tmp_path):
    file = write(tmp_path / "run.yaml", "method: dynasearcher\n")
    assert assemble(config_file=file, log=None).protocol == "dynasearcher"
    assert assemble(method="search_r1", config_file=file, log=None).method == "search_r1"
    assert assemble(config_file=file, flags={"method": "r1_searcher"}, log=None).method == "r1_searcher"
    assert assemble(log=None) == TrainConfig()  # no method: the plain config class
    assert isinstance(assemble(flags={"rejection_questions": 2}, config_class=SFTConfig, log=None), SFTConfig)


def test_the_adapter_fills_what_is_not_given_and_refuses_a_contradiction(tmp_path):
    said = []
    cfg = assemble(method="search_r1", flags={"init_adapter": str(SFT_ADAPTER)}, log=said.append)
    assert (cfg.max_turns, cfg.max_total_tokens) == (4, 1536) and len(said) == 1
    with pytest.raises(ValueError, match="--max-turns 2 contradicts"):
        assemble(method="search_r1", flags={"init_adapter": str(SFT_ADAPTER), "max_turns": 2}, log=None)
    cfg = assemble(method="search_r1", flags={"init_adapter": str(SFT_ADAPTER), "max_turns": 2},
                   override_adapter=True, log=None)
    assert cfg.max_turns == 2 and cfg.max_total_tokens == 1536


def test_the_checks_run_last():
    with pytest.raises(ValueError, match="TrainConfig.stage_switch_step"):
        assemble(flags={"reward": "dynasearcher", "stage_switch_step": 3}, log=None)


def test_the_short_forms_give_what_assemble_gives(tmp_path):
    file = write(tmp_path / "run.yaml", "method: search_r1\nrollout: {max_turns: 2}\n")
    flags = {"steps": 5, "reward": "dspo", "model": ""}
    assert methods.train_config("search_r1", log=None, **flags) == assemble(method="search_r1", flags=flags, log=None)
    assert methods.train_config_file(file, log=None, **flags) == assemble(config_file=file, flags=flags, log=None)
    sft = {"rejection_questions": 3}
    assert (methods.train_config("search_r1", SFTConfig, log=None, **sft)
            == assemble(method="search_r1", flags=sft, config_class=SFTConfig, log=None))
    given = {"init_adapter": str(SFT_ADAPTER)}
    assert methods.checked(methods.with_init_adapter("search_r1", None, given, log=None)) == assemble(
        method="search_r1", flags=given, log=None)
