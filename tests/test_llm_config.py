"""srb.config.check_llm_config: every bad LLM setting is a ConfigError naming its key."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from srb.config import ConfigError, check_llm_config


@pytest.fixture
def config(tmp_path: Path) -> dict[str, Any]:
    prompts = {}
    texts = {
        "synthesize": "{context}\n{question}\n",
        "synthesize_base": "{question}\n",
        "judge": "{question}\n{answer}\n",
    }
    for role, text in texts.items():
        path = tmp_path / f"{role}.md"
        path.write_text(text)
        prompts[role] = str(path)
    return {
        "systems": ["simple_rag", "section_rag"],
        "llm": {
            "synthesizer": "tiny",
            "judges": ["rubric", "tiny", "other"],
            "systems": ["simple_rag"],
            "direct_read_budget": "6K",
            "models": {"tiny": {"source": {"path": "/m"}}, "other": {"source": {"path": "/o"}}},
            "prompts": prompts,
        },
    }


def test_valid_config_passes(config: dict[str, Any]) -> None:
    check_llm_config(config)
    minimal = copy.deepcopy(config)
    for key in ("judges", "systems", "direct_read_budget", "prompts"):
        del minimal["llm"][key]
    check_llm_config(minimal)  # defaults: no judges, no systems, 6K, no prompts


def test_rubric_judge_needs_no_model(config: dict[str, Any]) -> None:
    config["llm"]["judges"] = ["rubric"]
    config["llm"]["models"] = {"tiny": {}}
    check_llm_config(config)


def test_unknown_synthesizer(config: dict[str, Any]) -> None:
    config["llm"]["synthesizer"] = "gpt-99"
    with pytest.raises(ConfigError, match=r"my.yaml: llm\.synthesizer: model 'gpt-99'"):
        check_llm_config(config, "my.yaml")


def test_unknown_judge(config: dict[str, Any]) -> None:
    config["llm"]["judges"] = ["rubric", "tiny", "judge-9"]
    with pytest.raises(ConfigError, match=r"llm\.judges: model 'judge-9' is not defined"):
        check_llm_config(config)


def test_llm_system_not_among_retrieval_systems(config: dict[str, Any]) -> None:
    config["llm"]["systems"] = ["simple_rag", "paper_rag"]
    with pytest.raises(ConfigError, match=r"llm\.systems: 'paper_rag' is not in systems or memory"):
        check_llm_config(config)


def test_a_synthesized_modality_must_be_a_restored_one(config: dict[str, Any]) -> None:
    config["modalities"] = ["dense", "hybrid"]
    config["llm"]["modalities"] = ["hybrid", "bm25"]
    with pytest.raises(ConfigError, match=r"my.yaml: llm\.modalities: 'bm25' is not in modalities"):
        check_llm_config(config, "my.yaml")


def test_an_llm_judged_system_must_be_a_synthesized_one(config: dict[str, Any]) -> None:
    config["llm"]["llm_only"] = ["base"]
    config["llm"]["judge_systems"] = ["base", "direct_read"]
    with pytest.raises(
        ConfigError, match=r"my.yaml: llm\.judge_systems: 'direct_read' is not synthesized"
    ):
        check_llm_config(config, "my.yaml")
    config["llm"]["judge_systems"] = ["base", *config["llm"]["systems"]]
    check_llm_config(config, "my.yaml")


@pytest.mark.parametrize("budget", ["6Q", "-5", "0", "lots", "native6K"])
def test_bad_direct_read_budget(config: dict[str, Any], budget: str) -> None:
    config["llm"]["direct_read_budget"] = budget
    with pytest.raises(ConfigError, match=r"llm\.direct_read_budget"):
        check_llm_config(config)


@pytest.mark.parametrize("budget", ["6K", "2500", "1M", 3000])
def test_good_direct_read_budget(config: dict[str, Any], budget: str | int) -> None:
    config["llm"]["direct_read_budget"] = budget
    check_llm_config(config)


def test_missing_prompt_template(config: dict[str, Any], tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "judge.md"
    config["llm"]["prompts"]["judge"] = str(missing)
    with pytest.raises(ConfigError, match=r"llm\.prompts\.judge: template .*nowhere/judge\.md"):
        check_llm_config(config)


@pytest.mark.parametrize(
    ("role", "text", "expected"),
    [
        (
            "synthesize",
            "Answer: {question}\n",
            r"synthesize\.md lacks placeholder\(s\) \{context\}",
        ),
        ("judge", "{question} {answer} {score}", r"unknown placeholder\(s\) \{score\}"),
        ("synthesize", "{question} {context} {a:", r"does not parse .*literal brace"),
        (
            "synthesize_base",
            "{question} {gold_answer}",
            r"unknown placeholder\(s\) \{gold_answer\}",
        ),
    ],
    ids=["missing-context", "unknown-field", "lone-brace", "base-with-gold"],
)
def test_prompt_template_placeholders_are_checked(
    config: dict[str, Any], tmp_path: Path, role: str, text: str, expected: str
) -> None:
    Path(config["llm"]["prompts"][role]).write_text(text)
    with pytest.raises(ConfigError, match=rf"llm\.prompts\.{role}: template .*{expected}"):
        check_llm_config(config)


def test_shipped_prompt_templates_pass() -> None:
    from srb.config import check_template

    repo = Path(__file__).resolve().parents[1]
    for role in ("synthesize", "synthesize_base", "judge", "prism"):
        check_template(role, repo / "config/prompts" / f"{role}.md")


def test_prompt_template_must_be_a_file(config: dict[str, Any], tmp_path: Path) -> None:
    config["llm"]["prompts"]["synthesize"] = str(tmp_path)  # a directory
    with pytest.raises(ConfigError, match=r"llm\.prompts\.synthesize"):
        check_llm_config(config)


def test_memory_systems_are_checked_before_any_job(config: dict[str, Any]) -> None:
    from srb.config import check_memory_config

    config["dense"] = {"cache": "cache/embeddings.sqlite"}
    config["memory"] = {"systems": ["mem9"], "llm": "smollm2-135m"}
    with pytest.raises(ConfigError, match=r"memory\.systems: unknown store system 'mem9'"):
        check_memory_config(config)
    config["memory"] = {"systems": ["mem0"], "llm": "no-such-model"}
    with pytest.raises(ConfigError, match=r"memory\.llm: model 'no-such-model' is not defined"):
        check_memory_config(config)
    config["memory"] = {"systems": ["mem0"], "llm": next(iter(config["llm"]["models"]))}
    config["dense"] = {"cache": None}
    with pytest.raises(ConfigError, match=r"needs dense\.cache"):
        check_memory_config(config)
