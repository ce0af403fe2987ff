"""Judging: direction labels, strict judgment parsing, the rubric judge, LLM-judge retries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from srb.data.schema import GOLD_LABELS, EvidenceSpan, Question
from srb.judge import (
    CRITERIA,
    JUDGE_SCHEMA,
    composite,
    label_from_answer,
    llm_judge,
    parse_judgment,
    render_judge_prompt,
    rubric_scores,
)
from srb.synthesize import template_hash

JUDGE_TEMPLATE = Path(__file__).resolve().parents[1] / "config" / "prompts" / "judge.md"

INC, DEC, NSD = GOLD_LABELS

# ---------------------------------------------------------------------- direction labels


@pytest.mark.parametrize(
    ("answer", "label"),
    [
        ("There was no significant difference in pain scores between the groups.", NSD),
        ("Mortality was not significantly different between the two arms.", NSD),
        ("Length of stay did not differ significantly.", NSD),
        ("The drug did not significantly reduce HbA1c (p = 0.21).", NSD),
        ("There was no statistically significant change in weight.", NSD),
        ("Outcomes were similar in both groups.", NSD),
        ("X increased, but not significantly.", NSD),
        ("Systolic pressure was significantly lower with drug X (132 vs 141 mmHg).", DEC),
        ("Drug X significantly reduced the rate of relapse.", DEC),
        ("HbA1c decreased significantly after 12 weeks.", DEC),
        ("Serum HDL significantly increased in the treatment arm.", INC),
        ("Exercise capacity was significantly higher in the intervention group.", INC),
        ("Pain relief increased significantly compared with placebo.", INC),
        ("The study enrolled 120 adults and measured blood pressure.", None),
        ("", None),
        ("SIGNIFICANTLY LOWER mortality was seen.", DEC),  # case-insensitive
        ("The reduction in relapse was statistically significant.", DEC),
        ("The difference was significant, with a 3.5 mmHg increase in blood pressure.", INC),
        ("Pain was significantly reduced (p < 0.001).", DEC),
        ("The results suggest that drug X significantly reduced pain.", DEC),  # not a hedge
        # significance without a direction states no label
        ("There was a significant difference between the groups (p < 0.01).", None),
        ("Drug X was significantly more effective than placebo in reducing vomiting.", None),
        ("Outcomes were significantly better with drug X.", None),
    ],
)
def test_label_from_answer(answer: str, label: str | None) -> None:
    assert label_from_answer(answer) == label


@pytest.mark.parametrize(
    "answer",
    [
        "There was a non-significant increase in pain scores.",
        "The drug failed to significantly reduce mortality.",
        "Treatment was not associated with a significant reduction in relapse.",
        "The difference failed to reach statistical significance.",
        "Pain scores showed an insignificant decrease.",
    ],
)
def test_label_negated_significance_is_no_difference(answer: str) -> None:
    assert label_from_answer(answer) == NSD


@pytest.mark.parametrize(
    "answer",
    [
        "The drug didn't significantly reduce pain.",
        "There wasn't a significant increase in pain.",
        "There weren't significantly fewer relapses.",
        "Drug X doesn't significantly lower LDL.",
        "Treatment hasn't significantly improved survival.",
        "The drug couldn't significantly reduce pain.",
        "The drug could not significantly reduce pain.",
        "Mortality wasn\u2019t significantly different.",  # curly apostrophe
        "Weight isn't significantly higher with drug X.",
    ],
)
def test_label_contracted_negation_is_no_difference(answer: str) -> None:
    assert label_from_answer(answer) == NSD


@pytest.mark.parametrize(
    ("answer", "label"),
    [
        ("Not only was pain significantly reduced, but sleep also improved.", DEC),
        ("Drug X not only significantly increased HDL but was well tolerated.", INC),
        ("Not just the primary outcome was significantly lower with drug X.", DEC),
    ],
)
def test_label_not_only_is_no_negation(answer: str, label: str) -> None:
    assert label_from_answer(answer) == label


@pytest.mark.parametrize(
    ("answer", "label"),
    [
        ("Treatment was not without a significant reduction in relapse.", DEC),
        ("The increase in HDL was not non-significant: it was significantly higher.", INC),
        # a reversed "no significant difference" asserts a difference but no direction
        ("It is not true that there was no significant difference in mortality.", None),
        ("The difference is not no significant difference.", None),
        ("The difference was not insignificant.", None),
        # ... which a stated direction then completes
        (
            "It is not the case that there was no significant difference: mortality fell "
            "significantly.",
            DEC,
        ),
    ],
)
def test_label_double_negation(answer: str, label: str | None) -> None:
    assert label_from_answer(answer) == label


@pytest.mark.parametrize(
    ("answer", "label"),
    [
        # an uncommitted claim states no label
        ("Drug X may have significantly reduced pain.", None),
        ("Drug X might significantly lower LDL.", None),
        ("Drug X could significantly improve survival.", None),
        ("Pain appeared to be significantly reduced.", None),
        ("HbA1c tended to be significantly lower with drug X.", None),
        ("There was a trend toward a significant reduction in mortality.", None),
        ("Drug X possibly increased HDL significantly.", None),
        ("The difference may not be significant.", None),
        ("There could be no significant difference in pain.", None),
        # ... and does not conflict with a committed one
        (
            "Drug X may have significantly reduced pain, but there was no significant difference "
            "in pain scores.",
            NSD,
        ),
        # a hedge elsewhere in the answer does not reach a claim in another clause
        ("The mechanism may be vascular. Drug X significantly reduced pain.", DEC),
        # a non-significant trend is no significant difference
        ("A trend toward lower mortality was not statistically significant.", NSD),
    ],
)
def test_label_hedges(answer: str, label: str | None) -> None:
    assert label_from_answer(answer) == label


@pytest.mark.parametrize(
    "answer",
    [
        # conflicting directions, or a direction with no significant difference, for one outcome
        "Pain was significantly reduced, and pain was significantly increased.",
        "There was a significant increase in SBP and a significant decrease in SBP.",
        "Drug X significantly reduced pain. There was no significant difference in pain.",
        # a significant difference, then none
        "There was a significant difference. The difference was not statistically significant.",
        "The difference was statistically significant (p = 0.001), but not significant overall.",
        # the rule cannot tell which measure is the question's outcome, so it abstains on
        # conflicting claims about different measures too (documented in label_from_answer)
        "Drug X significantly increased HDL, though LDL showed no significant difference.",
        "No significant difference overall, but the subgroup was significantly higher.",
        "Relapse was significantly reduced; adverse events were significantly increased.",
    ],
)
def test_label_conflicting_claims_abstain(answer: str) -> None:
    assert label_from_answer(answer) is None


@pytest.mark.parametrize(
    ("answer", "label"),
    [
        # repeating one claim is no conflict; nor is a significant difference with its direction
        ("The difference was not significant. The difference was not significant.", NSD),
        ("There was a significant difference: HbA1c was significantly lower with drug X.", DEC),
        # "similar" about baseline characteristics yields to a stated direction
        ("Baseline characteristics were similar; drug X significantly reduced pain.", DEC),
    ],
)
def test_label_consistent_claims(answer: str, label: str) -> None:
    assert label_from_answer(answer) == label


def test_label_incidental_similar_does_not_win() -> None:
    answer = "Compared with a similar cohort on placebo, drug X significantly increased HDL."
    assert label_from_answer(answer) == INC


# ---------------------------------------------------------------------- strict parsing

VALID = {
    "accuracy": 7,
    "completeness": 5,
    "specificity": 3,
    "hallucination_avoidance": 10,
    "retrieval_quality": 0,
}


def test_parse_judgment_valid() -> None:
    assert parse_judgment(json.dumps(VALID)) == VALID
    assert parse_judgment("  \n" + json.dumps(VALID) + "\n") == VALID


@pytest.mark.parametrize(
    "text",
    [
        json.dumps({k: v for k, v in VALID.items() if k != "specificity"}),  # missing key
        json.dumps({**VALID, "accuracy": 7.0}),  # float
        json.dumps({**VALID, "accuracy": 7.5}),
        json.dumps({**VALID, "completeness": 11}),
        json.dumps({**VALID, "completeness": -1}),
        json.dumps({**VALID, "specificity": True}),  # bool is not an int here
        json.dumps({**VALID, "specificity": "7"}),
        json.dumps({**VALID, "specificity": None}),
        json.dumps({**VALID, "overall": 8}),  # extra key
        json.dumps([VALID]),  # not an object
        json.dumps(7),
        '"accuracy: 7"',
        "The answer is good. accuracy=7",  # garbage
        "```json\n" + json.dumps(VALID) + "\n```",  # fenced: not strict JSON
        json.dumps(VALID)[:-1],  # cut off
        "",
    ],
)
def test_parse_judgment_rejects(text: str) -> None:
    with pytest.raises(ValueError):  # json.JSONDecodeError is a ValueError
        parse_judgment(text)


def test_schema_matches_the_parser() -> None:
    assert JUDGE_SCHEMA["required"] == list(CRITERIA)
    assert JUDGE_SCHEMA["additionalProperties"] is False
    assert all(
        p == {"type": "integer", "minimum": 0, "maximum": 10}
        for p in JUDGE_SCHEMA["properties"].values()
    )


def test_composite_is_mean_of_first_four() -> None:
    assert composite(VALID) == pytest.approx((7 + 5 + 3 + 10) / 4)  # 6.25
    assert composite({**VALID, "retrieval_quality": 10}) == 6.25  # not part of it
    assert composite({c: 1 for c in CRITERIA} | {"accuracy": 0}) == 0.75
    assert composite({c: 3 for c in CRITERIA} | {"completeness": 4}) == 3.25


# ---------------------------------------------------------------------- rubric judge

QUESTION = Question(
    id="q1",
    question="Did drug X change systolic blood pressure compared with placebo?",
    gold_answer="Drug X significantly decreased systolic blood pressure (132 vs 141 mmHg).",
    must_have=(
        f"Reported difference: {DEC}",
        "systolic blood pressure fell to 132 mmHg with drug X",
        "placebo group stayed at 141 mmHg",
    ),
    paper_ids=("p1",),
    evidence=(EvidenceSpan("p1", 100, 200),),
    gold_label=DEC,
)
FULL = (
    "Drug X significantly decreased systolic blood pressure: it fell to 132 mmHg, "
    "while the placebo group stayed at 141 mmHg."
)


def cell(spans: list[list] | None = None, context: str = "") -> dict:
    return {"question_id": "q1", "spans": spans or [], "context": context}


def test_rubric_full_answer() -> None:
    assert rubric_scores(QUESTION, FULL, cell([["p1", 0, 300]])) == {
        "accuracy": 10.0,
        "completeness": 10.0,
        "specificity": 10.0,
        "hallucination_avoidance": 10.0,
        "retrieval_quality": 10.0,
    }


def test_rubric_accuracy_follows_the_label() -> None:
    wrong = FULL.replace("significantly decreased", "significantly increased")
    assert rubric_scores(QUESTION, wrong, cell())["accuracy"] == 0.0
    none = FULL.replace("significantly decreased", "changed")
    assert rubric_scores(QUESTION, none, cell())["accuracy"] == 0.0
    assert rubric_scores(QUESTION, "It was significantly lower.", cell())["accuracy"] == 10.0


def test_rubric_accuracy_without_gold_label_uses_gold_answer_coverage() -> None:
    q = Question(
        id="q2",
        question="What enzyme does drug Y inhibit?",
        gold_answer="Drug Y inhibits cyclooxygenase enzymes",  # words: drug, inhibits, cyclooxygenase, enzymes
        must_have=("cyclooxygenase",),
        paper_ids=("p1",),
    )
    assert rubric_scores(q, "Drug Y inhibits cyclooxygenase.", cell())["accuracy"] == 10.0
    assert rubric_scores(q, "It inhibits cyclooxygenase.", cell())["accuracy"] == 10.0  # 2/4
    assert rubric_scores(q, "It blocks cyclooxygenase.", cell())["accuracy"] == 5.0  # 1/4
    assert rubric_scores(q, "No idea.", cell())["accuracy"] == 0.0


def test_rubric_completeness_rises_with_covered_facts() -> None:
    none = rubric_scores(QUESTION, "It was significantly lower.", cell())["completeness"]
    # fact 1 has 7 content words; 2 covered -> (2/7)/0.5 = 4/7; fact 2 uncovered
    part = rubric_scores(QUESTION, "Blood pressure was significantly lower.", cell())
    one = rubric_scores(QUESTION, "Drug X significantly decreased systolic blood pressure.", cell())
    full = rubric_scores(QUESTION, FULL, cell())["completeness"]
    assert none == 0.0
    assert part["completeness"] == pytest.approx(10 * (4 / 7) / 2, abs=1e-3)  # 2.857
    assert one["completeness"] == 5.0  # fact 1 saturates at half its words, fact 2 none
    assert full == 10.0
    assert none < part["completeness"] < one["completeness"] < full
    # the "Reported difference:" line is the label's job, not a fact to cover
    only_label = Question(
        id="q3",
        question="?",
        gold_answer="",
        must_have=(f"Reported difference: {DEC}",),
        paper_ids=("p1",),
        gold_label=DEC,
    )
    assert rubric_scores(only_label, "significantly decreased", cell())["completeness"] == 0.0


def test_rubric_specificity_counts_gold_numbers() -> None:
    half = "Drug X significantly decreased it to 132 mmHg."
    assert rubric_scores(QUESTION, half, cell())["specificity"] == 5.0
    assert rubric_scores(QUESTION, FULL, cell())["specificity"] == 10.0
    assert rubric_scores(QUESTION, "It was significantly lower.", cell())["specificity"] == 0.0


def test_rubric_unsupported_numbers_lower_hallucination_avoidance() -> None:
    answer = (
        "Drug X significantly decreased systolic pressure to 132 mmHg (vs 141 mmHg) "
        "in 57 patients over 12 weeks."
    )
    # 4 numbers; 132 and 141 are in the rubric, 57 and 12 are not
    assert rubric_scores(QUESTION, answer, cell())["hallucination_avoidance"] == 5.0
    # numbers the context shows are supported
    in_context = cell(context="We enrolled 57 patients with hypertension.")
    assert rubric_scores(QUESTION, answer, in_context)["hallucination_avoidance"] == 7.5
    both = cell(context="57 patients were followed for 12 weeks.")
    assert rubric_scores(QUESTION, answer, both)["hallucination_avoidance"] == 10.0
    # no numbers at all: nothing invented
    assert rubric_scores(QUESTION, "It was lower.", cell())["hallucination_avoidance"] == 10.0


@pytest.mark.parametrize(
    ("spans", "expected"),
    [
        ([["p1", 0, 300]], 10.0),
        ([["p1", 50, 150]], 5.0),  # half the gold span
        ([["p1", 100, 130], ["p1", 120, 160]], 6.0),  # overlap counted once
        ([["p1", 100, 125], ["p1", 175, 200]], 5.0),
        ([["p2", 0, 1000]], 0.0),  # another paper
        ([["p1", 0, 100]], 0.0),  # adjacent, not overlapping
        ([], 0.0),  # no context (base)
    ],
)
def test_rubric_retrieval_quality_is_evidence_recall(spans: list, expected: float) -> None:
    assert rubric_scores(QUESTION, FULL, cell(spans))["retrieval_quality"] == expected


def test_rubric_retrieval_quality_without_gold_evidence_is_zero() -> None:
    q = Question(id="q4", question="?", gold_answer="x", must_have=(), paper_ids=("p1",))
    assert rubric_scores(q, "x", cell([["p1", 0, 100]]))["retrieval_quality"] == 0.0


# ---------------------------------------------------------------------- LLM judge


class FakeJudgeClient:
    """Replies per (question id in the prompt, seed); records every run() call."""

    model_name = "judge-x"

    def __init__(self, replies: dict[tuple[str, int], str], default: str):
        self.replies, self.default = replies, default
        self.runs: list[tuple[list, str, str]] = []

    def run(self, requests, template_hash, desc="LLM calls"):
        self.runs.append((list(requests), template_hash, desc))
        out = []
        for r in requests:
            prompt = r.messages[0]["content"]
            qid = prompt.split("QUESTION: ", 1)[1].split(" ::", 1)[0]
            text = self.replies.get((qid, r.seed), self.default)
            out.append(
                {
                    "text": text,
                    "prompt_tokens": 1,
                    "completion_tokens": 1,
                    "latency_s": 0.0,
                    "finish_reason": "stop",
                }
            )
        return out


def items(n: int) -> list[tuple[Question, str, str]]:
    qs = [
        Question(
            id=f"q{i}",
            question=f"q{i} :: did it change?",
            gold_answer="It significantly decreased.",
            must_have=("it fell",),
            paper_ids=("p1",),
            gold_label=DEC,
        )
        for i in range(n)
    ]
    answers = [
        "It was significantly lower.",
        "It significantly increased.",
        "No idea.",
        "It was significantly reduced.",
    ]
    return [(q, answers[i % 4], f"context {i}") for i, q in enumerate(qs)]


GOOD = json.dumps(VALID)


def test_llm_judge_retries_only_the_unparsable_with_a_new_seed() -> None:
    client = FakeJudgeClient({("q1", 0): "Sure! Here are the scores: 7/10"}, default=GOOD)
    records = llm_judge(client, JUDGE_TEMPLATE, items(4), 3, 64, 100)
    assert len(client.runs) == 2
    first, second = client.runs
    assert [r.seed for r in first[0]] == [0, 0, 0, 0]
    assert len(second[0]) == 1 and second[0][0].seed == 1
    assert second[0][0].messages == first[0][1].messages  # the same prompt, q1's
    assert all(r.json_schema == JUDGE_SCHEMA and r.max_tokens == 64 for r in first[0])
    assert first[1] == second[1] == template_hash(JUDGE_TEMPLATE)
    assert [r["question_id"] for r in records] == ["q0", "q1", "q2", "q3"]
    assert all(r["valid"] and r["scores"] == VALID for r in records)
    assert all(r["composite"] == 6.25 and r["judge"] == "judge-x" for r in records)
    assert [r["attempts"] for r in records] == [1, 2, 1, 1]
    assert [r["error"] for r in records] == [None] * 4
    assert [r["stated_label"] for r in records] == [DEC, INC, None, DEC]
    assert [r["label_correct"] for r in records] == [True, False, False, True]


def test_llm_judge_gives_up_with_an_invalid_record() -> None:
    client = FakeJudgeClient(
        {("q2", s): '{"accuracy": 11}' for s in range(3)} | {("q0", 0): "garbage"}, default=GOOD
    )
    records = llm_judge(client, JUDGE_TEMPLATE, items(3), 3, 64, 100)
    assert [len(run[0]) for run in client.runs] == [3, 2, 1]
    assert [[r.seed for r in run[0]] for run in client.runs] == [[0, 0, 0], [1, 1], [2]]
    bad = records[2]
    assert bad["question_id"] == "q2"
    assert bad["valid"] is False
    assert bad["scores"] is None and bad["composite"] is None
    assert bad["attempts"] == 3
    assert bad["error"].startswith("attempt 3: ")
    assert "accuracy" in bad["error"] and '{"accuracy": 11}' in bad["error"]
    assert bad["stated_label"] is None and bad["label_correct"] is False  # "No idea."
    assert records[0]["valid"] and records[0]["attempts"] == 2
    assert records[1]["valid"] and records[1]["attempts"] == 1


def test_render_judge_prompt() -> None:
    template = JUDGE_TEMPLATE.read_text()
    q = items(1)[0][0]
    prompt = render_judge_prompt(template, q, "It fell.", "0123456789" * 10, 25)
    assert "QUESTION: q0 :: did it change?" in prompt
    assert "Gold answer: It significantly decreased." in prompt
    assert "- it fell" in prompt
    assert "0123456789012345678901234\n" in prompt  # context cut to 25 characters
    assert "01234567890123456789012345" not in prompt
    assert "ANSWER: It fell." in prompt
    bare = Question(id="x", question="?", gold_answer="g", must_have=(), paper_ids=("p",))
    empty = render_judge_prompt(template, bare, "", "", 25)
    assert "- (none listed)" in empty and "(none)" in empty and "ANSWER: (empty)" in empty
