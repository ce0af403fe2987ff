"""Judging answers against the question's rubric (gold answer + must-have facts).

Two kinds of judge share one record shape:
- `rubric`: deterministic, no LLM. Direction label agreement, must-have fact coverage, numbers
  grounded in rubric/context. A sanity anchor for LLM judges, which discriminate poorly when tiny.
- an LLM judge: structured JSON (vLLM json_schema), strict parsing, bounded retries (a new seed
  each time), then an explicit invalid record. Invalid cells are counted, never scored as zero.
"""

from __future__ import annotations

import json
import logging
import re
import statistics
from pathlib import Path
from typing import Any

from srb.data.schema import GOLD_LABELS, Question
from srb.diagnostics import evidence_recall
from srb.llm.backends import ChatRequest
from srb.llm.client import LLMClient

log = logging.getLogger(__name__)

CRITERIA = (
    "accuracy",
    "completeness",
    "specificity",
    "hallucination_avoidance",
    "retrieval_quality",
)
COMPOSITE = CRITERIA[:4]  # the paper's no-retrieval composite

JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {c: {"type": "integer", "minimum": 0, "maximum": 10} for c in CRITERIA},
    "required": list(CRITERIA),
    "additionalProperties": False,
}

_WORD = re.compile(r"[a-z0-9]+(?:\.[0-9]+)?")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?")
_STOP = set(
    "the a an of and or in on to for with by at from as is was were be been are that this these those "
    "it its than then between compared reported difference group groups vs versus".split()
)

# Direction labels, read from an answer by keyword rules (no LLM). The patterns run on lower-cased
# text with curly apostrophes straightened; a negation or hedge reaches no further than its own
# clause (no . , ; : ! ? or parenthesis in between).
_INC, _DEC, _NSD = GOLD_LABELS
_SEP = r"[^\w.,;:!?()']+"  # the space between two words of one clause
_NEGATOR = (
    r"(?:\b(?:not(?!\s+(?:only|just|merely)\b)|no|never|nor|neither|without|cannot|"
    r"lack(?:s|ed|ing)?\s+of|absence\s+of|fail(?:s|ed|ing)?\s+to)\b|n't\b)"
)
# Up to three words that are not themselves negators, so "not without a significant reduction"
# yields the inner "without ..." claim, which the outer "not" then reverses.
_GAP = (
    rf"(?:{_SEP}(?!(?:not|no|non|never|nor|neither|without|cannot)\b|\w+n't\b)\w+(?:'\w+)?){{0,3}}?"
    rf"{_SEP}"
)
# Negated significance ("no significant", "did not significantly", "wasn't a significant",
# "non-significant", "failed to reach statistical significance") and "no difference" phrasings.
_NO_DIFFERENCE = re.compile(
    r"\bnon-?significant(?:ly)?\b|\binsignificant(?:ly)?\b|"
    rf"{_NEGATOR}{_GAP}(?:statistical(?:ly)?{_SEP})?significan(?:t(?:ly)?|ce)\b|"
    rf"\bno{_SEP}(?:(?:meaningful|real|notable|apparent|overall|clear|measurable){_SEP})?"
    r"(?:difference|change|effect)s?\b|"
    rf"(?:\bnot|n't){_SEP}(?:differ|change)\w*\b"
)
# Weaker: "similar" / "comparable" also describe baseline characteristics or cohorts, so they only
# decide an answer that states nothing else.
_SIMILAR = re.compile(r"\b(?:was|were|are|is|remained) (?:similar|comparable)\b")
# "... was significant" after a direction noun in the same clause: "the reduction in pain was
# statistically significant".
_WAS_SIGNIFICANT = (
    rf"(?:{_SEP}\w+){{0,4}}?{_SEP}(?:was|were|is|are)"
    rf"(?:{_SEP}(?:highly|statistically))?{_SEP}significant\b"
)
# "... was significant, with a 3.5 mmHg increase": the direction noun the significance is about.
_SIGNIFICANT_WITH = r"\bsignificant(?:ly)?,?\s+with\s+an?\s+(?:[\w.%\u00b1/-]+\s+){0,3}?"
# "Better", "worse", "more / less effective" judge value, not the outcome's direction
# ("significantly more effective in reducing vomiting"): significance without a direction.
_DIRECTIONS = {
    _INC: re.compile(
        r"\bsignificant(?:ly)? (?:higher|greater|more(?! effective| efficacious)|increase[ds]?|"
        r"improve[ds]?|rise|increas\w*|improv\w*|elevat\w*|longer)|"
        r"\b(?:increased|improved|higher|rose|greater|elevated|longer) significantly\b|"
        rf"\b(?:increase|rise|improvement|elevation)s?{_WAS_SIGNIFICANT}|"
        rf"{_SIGNIFICANT_WITH}(?:increase|rise|improvement|elevation|gain)"
    ),
    _DEC: re.compile(
        r"\bsignificant(?:ly)? (?:lower|less(?! effective| efficacious)|fewer|decrease[ds]?|"
        r"reduce[ds]?|reduction|decline|drop|decreas\w*|reduc\w*|shorter)|"
        r"\b(?:decreased|reduced|lower|fell|declined|dropped|shorter) significantly\b|"
        rf"\b(?:decrease|reduction|decline|drop|fall)s?{_WAS_SIGNIFICANT}|"
        rf"{_SIGNIFICANT_WITH}(?:decrease|reduction|decline|drop|fall)"
    ),
}
# A significance claim with no direction ("a significant difference", "differed significantly",
# "p < 0.05"): compatible with a stated direction, in conflict with "no significant difference".
_SIGNIFICANT = re.compile(
    r"(?<!clinically )\b(?:statistically )?significant(?:ly)?\b|"
    r"\bp\s*[<\u2264]\s*0?\.0(?:[0-4]\d*|50*)\b"
)
# A negation reversed: "not without ...", "not no ...", "it is not true that there was no ...".
_DOUBLE_NEGATION = re.compile(
    r"(?:\bnot|n't)(?:\s+(?:true|the case|correct|accurate)\s+that(?:\s+\w+){0,3}?)?\s+$"
)
# Uncommitted wording within the claim's clause ("may have significantly reduced", "tended to be
# significantly higher", "a trend toward a significant reduction"). "Could not" is a negation, and
# a trend or tendency that was not significant is no significant difference, not a hedge.
_HEDGE = re.compile(
    r"\b(may|might|could|possibly|perhaps|potentially|probably|likely|"
    r"appear(?:s|ed)?\s+to|seem(?:s|ed)?\s+to|tend(?:s|ed)?\s+to|trend(?:s|ed)?(?:\s+towards?)?)"
    rf"{_GAP}$"
)


def _hedged(text: str, start: int, negation: bool = False) -> bool:
    hedge = _HEDGE.search(text[max(0, start - 80) : start] + " ")
    if hedge is None:
        return False
    if hedge[1] == "could":  # "could not" / "couldn't" is a negation
        return not text.startswith(("not", "n't"), start)
    return not (negation and hedge[1].startswith(("trend", "tend")))


def _overlaps(span: tuple[int, int], among: list[tuple[int, int]]) -> bool:
    return any(s < span[1] and span[0] < e for s, e in among)


def label_from_answer(answer: str) -> str | None:
    """Map an answer to a gold-label direction by keyword rules (no LLM); None if it states none.

    The answer's claims are read clause by clause:
    - a direction: "significantly lower/reduced/increased ...", "decreased significantly";
    - no significant difference: negated significance ("non-significant increase", "did not /
      didn't / wasn't / failed to ... significant(ly)", "without a significant reduction"),
      "no difference / change / effect", "did not differ"; a negated direction is this label.
      "Not only ... significantly reduced" is no negation. A double negation reverses one: "not
      without a significant reduction" is decreased, "it is not true that there was no significant
      difference" asserts a significant difference without a direction;
    - a significant difference without a direction ("a significant difference", "p < 0.05");
    - "similar" / "comparable", used only when the answer states nothing else.
    A hedged claim ("may have", "might", "could", "possibly", "appeared / seemed / tended to",
    "a trend toward" within three words before it) is not asserted and counts for nothing;
    "suggest(s)" alone is not a hedge.

    The label is the one the answer asserts consistently, or None: it abstains when the answer
    asserts conflicting labels (both directions, or a direction or an undirected significant
    difference together with no significant difference). A rule with no model of the outcome
    cannot tell which of several measures the question is about, so this holds even when the
    conflicting claims name different measures ("HDL rose significantly; LDL did not differ"):
    no single direction is then stated for the question's outcome.
    """
    text = answer.lower().replace("\u2019", "'")
    negated: list[tuple[int, int]] = []  # "no significant difference" claims, hedged or not
    reversed_: list[tuple[int, int]] = []  # double negations
    stated: set[str] = set()
    for m in _NO_DIFFERENCE.finditer(text):
        if _DOUBLE_NEGATION.search(text[max(0, m.start() - 60) : m.start()]):
            reversed_.append(m.span())
        else:
            negated.append(m.span())
            if not _hedged(text, m.start(), negation=True):
                stated.add(_NSD)
    claims = negated + reversed_
    directed: list[tuple[int, int]] = []  # reversed negations with a direction inside
    for label, pattern in _DIRECTIONS.items():
        for m in pattern.finditer(text):
            claims.append(m.span())
            if _overlaps(m.span(), negated):
                continue  # a negated direction: no significant difference, counted above
            if _overlaps(m.span(), reversed_):
                directed.append(m.span())
                stated.add(label)
            elif not _hedged(text, m.start()):
                stated.add(label)
    undirected = any(not _overlaps(span, directed) for span in reversed_) or any(
        not _overlaps(m.span(), claims) and not _hedged(text, m.start())
        for m in _SIGNIFICANT.finditer(text)
    )
    directions = stated - {_NSD}
    if len(directions) > 1 or (directions and _NSD in stated):
        return None
    if directions:
        return directions.pop()
    if _NSD in stated:
        return None if undirected else _NSD
    if not undirected and _SIMILAR.search(text):
        return _NSD
    return None


def _content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 2}


def fact_coverage(fact: str, answer: str) -> float:
    words = _content_words(fact)
    if not words:
        return 1.0
    return len(words & _content_words(answer)) / len(words)


def rubric_scores(question: Question, answer: str, cell: dict[str, Any]) -> dict[str, float]:
    """Deterministic 0-10 scores from the rubric; retrieval quality = evidence recall x 10."""
    facts = [f for f in question.must_have if not f.startswith("Reported difference:")]
    coverage = [min(1.0, fact_coverage(f, answer) / 0.5) for f in facts] if facts else []
    completeness = 10 * statistics.fmean(coverage) if coverage else 0.0
    if question.gold_label:
        stated = label_from_answer(answer)
        accuracy = 10.0 if stated == question.gold_label else 0.0
    else:
        accuracy = 10 * min(1.0, fact_coverage(question.gold_answer, answer) / 0.5)
    gold_numbers = set(_NUMBER.findall(" ".join(question.must_have) + " " + question.gold_answer))
    answer_numbers = _NUMBER.findall(answer)
    specificity = (
        10 * len(gold_numbers & set(answer_numbers)) / len(gold_numbers)
        if gold_numbers
        else completeness
    )
    supported = gold_numbers | set(_NUMBER.findall(cell.get("context", "")))
    unsupported = [n for n in answer_numbers if n not in supported and n not in question.question]
    hallucination = 10 * (1 - len(unsupported) / len(answer_numbers)) if answer_numbers else 10.0
    recall = evidence_recall(question, cell)
    retrieval = 10 * recall if recall is not None else 0.0
    return {
        "accuracy": round(accuracy, 3),
        "completeness": round(completeness, 3),
        "specificity": round(specificity, 3),
        "hallucination_avoidance": round(hallucination, 3),
        "retrieval_quality": round(retrieval, 3),
    }


def parse_judgment(text: str) -> dict[str, int]:
    """Strict: a JSON object with every criterion as an integer in 0..10, nothing else."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("judgment is not a JSON object")
    scores = {}
    for c in CRITERIA:
        v = data.get(c)
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 10:
            raise ValueError(f"{c!r} must be an integer 0..10, got {v!r}")
        scores[c] = v
    extra = set(data) - set(CRITERIA)
    if extra:
        raise ValueError(f"unexpected keys {sorted(extra)}")
    return scores


def composite(scores: dict[str, float]) -> float:
    return round(statistics.fmean(scores[c] for c in COMPOSITE), 3)


def judge_record(
    qid: str,
    judge: str,
    scores: dict[str, float] | None,
    error: str | None,
    attempts: int,
    answer: str,
    gold_label: str | None,
) -> dict[str, Any]:
    stated = label_from_answer(answer)
    return {
        "question_id": qid,
        "judge": judge,
        "valid": scores is not None,
        "scores": scores,
        "composite": composite(scores) if scores else None,
        "attempts": attempts,
        "error": error,
        "stated_label": stated,
        "label_correct": (stated == gold_label) if gold_label else None,
    }


def render_judge_prompt(
    template: str, q: Question, answer: str, context: str, max_context_chars: int
) -> str:
    return template.format(
        question=q.question,
        gold_answer=q.gold_answer,
        must_have="\n".join(f"- {f}" for f in q.must_have) or "- (none listed)",
        context=context[:max_context_chars] if context else "(none)",
        answer=answer or "(empty)",
    )


def llm_judge(
    client: LLMClient,
    template_file: str | Path,
    items: list[tuple[Question, str, str]],
    retries: int,
    max_tokens: int,
    max_context_chars: int,
) -> list[dict[str, Any]]:
    """items: (question, answer, context). Retries only the unparsable, each with a new seed."""
    from srb.synthesize import template_hash

    template = Path(template_file).read_text(encoding="utf-8")
    t_hash = template_hash(template_file)
    prompts = [render_judge_prompt(template, q, a, c, max_context_chars) for q, a, c in items]
    results: list[dict[str, Any] | None] = [None] * len(items)
    errors: list[str | None] = [None] * len(items)
    pending = list(range(len(items)))
    attempt = 0
    while pending and attempt < retries:
        attempt += 1
        requests = [
            ChatRequest(
                [{"role": "user", "content": prompts[i]}],
                max_tokens=max_tokens,
                seed=attempt - 1,
                json_schema=JUDGE_SCHEMA,
            )
            for i in pending
        ]
        completions = client.run(requests, t_hash, desc=f"judge attempt {attempt}")
        still = []
        for i, c in zip(pending, completions, strict=True):
            q, answer, _ = items[i]
            try:
                scores = parse_judgment(c["text"])
            except (ValueError, json.JSONDecodeError) as exc:
                errors[i] = f"attempt {attempt}: {exc}: {c['text'][:200]!r}"
                still.append(i)
                continue
            results[i] = judge_record(
                q.id, client.model_name, scores, None, attempt, answer, q.gold_label
            )
        pending = still
    for i in pending:
        q, answer, _ = items[i]
        results[i] = judge_record(
            q.id, client.model_name, None, errors[i], attempt, answer, q.gold_label
        )
    if pending:
        log.warning(
            "%d of %d judgments invalid after %d attempts", len(pending), len(items), retries
        )
    return [r for r in results if r is not None]


def rubric_judge(items: list[tuple[Question, str, dict[str, Any]]]) -> list[dict[str, Any]]:
    return [
        judge_record(q.id, "rubric", rubric_scores(q, answer, cell), None, 1, answer, q.gold_label)
        for q, answer, cell in items
    ]


def judge_cell(
    answers_file: str | Path,
    cell_file: str | Path,
    corpus_dir: str | Path,
    judge: str,
    out: str | Path,
    client: LLMClient | None = None,
    template_file: str | Path | None = None,
    retries: int = 3,
    max_tokens: int = 128,
    max_context_chars: int = 3000,
) -> None:
    from srb.atomic import write_jsonl
    from srb.data.canonical import iter_jsonl, load_canonical

    questions = {q.id: q for q in load_canonical(corpus_dir).questions}
    cells = {r["question_id"]: r for _, r in iter_jsonl(Path(cell_file))}
    answers = [r for _, r in iter_jsonl(Path(answers_file))]
    if judge == "rubric":
        records = rubric_judge(
            [(questions[a["question_id"]], a["answer"], cells[a["question_id"]]) for a in answers]
        )
    else:
        if client is None or template_file is None:
            raise ValueError(f"LLM judge {judge!r} needs a client and a template")
        items = [
            (questions[a["question_id"]], a["answer"], cells[a["question_id"]]["context"])
            for a in answers
        ]
        records = llm_judge(client, template_file, items, retries, max_tokens, max_context_chars)
    write_jsonl(out, records)
