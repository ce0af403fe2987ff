"""Synthesis: fitting contexts to the window, LLM-only contexts, one answer record per question."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from srb.data.canonical import iter_jsonl, write_canonical
from srb.data.schema import Corpus, EvidenceSpan, Paper, Question
from srb.synthesize import ContextFitter, llm_only_cell, synthesize_cell, template_hash

PROMPTS = Path(__file__).resolve().parents[1] / "config" / "prompts"
TEMPLATES = {"context": PROMPTS / "synthesize.md", "base": PROMPTS / "synthesize_base.md"}
TEMPLATE = "Excerpts:\n{context}\n\nQuestion: {question}\nAnswer:"


# ---------------------------------------------------------------------- ContextFitter


def room(fitter: ContextFitter, template: str, question: str) -> int:
    skeleton = template.format(question=question, context="")
    return fitter.max_model_len - fitter.max_answer_tokens - (len(skeleton) // 4 + 1) - 64


def test_fallback_counts_four_chars_per_token(tmp_path: Path) -> None:
    fitter = ContextFitter(None, 2048, 160)
    assert fitter.tokenizer is None
    assert fitter.count("") == 1
    assert fitter.count("abc") == 1
    assert fitter.count("abcd") == 2
    assert fitter.count("x" * 400) == 101
    # a model directory without tokenizer files falls back too (no model is loaded)
    assert ContextFitter(str(tmp_path), 2048, 160).tokenizer is None


def test_fit_short_context_untouched() -> None:
    fitter = ContextFitter(None, 300, 50)
    context = "Drug X lowered systolic pressure to 132 mmHg."
    assert fitter.fit(TEMPLATE, "Did it work?", context) == (context, False)
    assert fitter.fit(TEMPLATE, "Did it work?", "") == ("", False)


def test_fit_long_context_cut_and_flagged() -> None:
    fitter = ContextFitter(None, 300, 50)
    q = "Did it work?"
    r = room(fitter, TEMPLATE, q)
    assert r == 300 - 50 - 11 - 64  # skeleton is 40 characters
    context = "".join(f"sentence {i:04d}. " for i in range(200))  # 3000 characters
    used, truncated = fitter.fit(TEMPLATE, q, context)
    assert truncated is True
    assert used == context[: (r - 1) * 4]  # the cut itself counts as <= room tokens
    assert len(used) == 696  # (175 - 1) * 4
    assert fitter.count(used) <= r
    # at the boundary the context is kept whole
    fits = "z" * (r * 4 - 1)  # counts as exactly `room` tokens
    assert fitter.fit(TEMPLATE, q, fits) == (fits, False)


def test_fit_is_idempotent() -> None:
    fitter = ContextFitter(None, 300, 50)
    q = "Did it work?"
    used, _ = fitter.fit(TEMPLATE, q, "w" * 5000)
    assert fitter.fit(TEMPLATE, q, used) == (used, False)


def test_prompt_that_cannot_fit_raises() -> None:
    fitter = ContextFitter(None, 60, 40)
    with pytest.raises(ValueError, match="does not fit a 60-token window with 40 answer tokens"):
        fitter.fit(TEMPLATE, "Did it work?", "some context")


# ------------------------------------------------- ContextFitter, real SmolLM2 tokenizer

REPO = Path(__file__).resolve().parents[1]
# Non-ASCII scientific notation ahead of the cut: offsets must be characters, not bytes, or
# the kept text would run past the tokens counted.
NOTATION = (
    "Systolic pressure fell by 5.2 ± 1.1 mmHg (95% CI 3.1–7.3; p ≤ 0.001) in adults ≥ 18 "
    "years; urinary sodium 120 μmol × day⁻¹ (Δ −38%). "
)


@pytest.fixture(scope="module")
def smollm2() -> dict:
    """The packaged SmolLM2-135M prepared as the workflow prepares it (about a minute the first
    time, reused from cache/models afterwards), with the default config's window settings."""
    import yaml

    from srb.llm.models import ensure_model

    llm = yaml.safe_load((REPO / "config/config.yaml").read_text())["llm"]
    spec = llm["models"]["smollm2-135m"]
    ensure_model("smollm2-135m", spec, REPO / "cache/models")
    model_dir = REPO / "cache/models/smollm2-135m"
    return {
        "dir": model_dir,
        "max_model_len": spec["max_model_len"],
        "max_answer_tokens": llm["max_answer_tokens"],
        "template": (PROMPTS / "synthesize.md").read_text(encoding="utf-8"),
    }


def test_context_fitter_with_the_real_smollm2_tokenizer(smollm2: dict) -> None:
    import jinja2
    from tokenizers import Tokenizer

    model_dir, template = smollm2["dir"], smollm2["template"]
    window, answer = smollm2["max_model_len"], smollm2["max_answer_tokens"]
    assert (window, answer) == (
        2048,
        128,
    )  # config/config.yaml: smollm2-135m, llm.max_answer_tokens
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))

    def ids(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False).ids

    papers = REPO / "resources/corpora/evidence-inference-ccby/papers.jsonl"
    paper = next(json.loads(line) for line in papers.open() if '"PMC1382202"' in line)
    question = "Did reducing salt intake change systolic blood pressure after 6 months?"
    context = NOTATION * 12 + paper["text"]
    assert tok.decode(ids(context)) == context  # byte-level BPE: decoding gives the text back
    # The fitter's room for the context: the window less the answer, its 64-token allowance for
    # the chat wrapper, and the prompt without context, all counted here with `tokenizers`.
    skeleton = template.format(question=question, context="")
    room = window - answer - 64 - len(ids(skeleton))
    assert 1000 < room < len(ids(context))  # the paper alone would overflow the window

    fitter = ContextFitter(str(model_dir), window, answer)
    assert fitter.has_tokenizer

    # a long context is cut to exactly its first `room` tokens
    used, truncated = fitter.fit(template, question, context)
    assert truncated is True
    assert context.startswith(used)  # one cut, at len(used) characters
    first = ids(context)[:room]
    assert used == tok.decode(first)  # the cut lands after the room-th token of the context
    assert ids(used) == first
    assert used.startswith(NOTATION * 12) and len(used) > len(NOTATION) * 12

    # ... and the prompt the server sees fits: the model's own chat template around the filled
    # prompt template, plus the answer tokens, stays within the window
    chat = jinja2.Template((model_dir / "chat_template.jinja").read_text()).render(
        messages=[{"role": "user", "content": template.format(question=question, context=used)}],
        add_generation_prompt=True,
    )
    assert chat.startswith("<|im_start|>system\n") and chat.endswith("<|im_start|>assistant\n")
    assert len(ids(chat)) + answer <= window

    # exactly `room` tokens: kept whole (its UTF-8 bytes exceed the room, so they are counted)
    end = tok.encode(context, add_special_tokens=False).offsets[room - 1][1]
    exact = context[:end]
    assert len(ids(exact)) == room
    assert len((skeleton + exact).encode("utf-8")) > window - answer - 64
    assert fitter.fit(template, question, exact) == (exact, False)
    # one token more is cut back to the same `room` tokens
    longer = context[: tok.encode(context, add_special_tokens=False).offsets[room][1]]
    assert len(ids(longer)) == room + 1
    assert fitter.fit(template, question, longer) == (exact, True)
    # a short context is kept whole, fitted again unchanged
    assert fitter.fit(template, question, NOTATION) == (NOTATION, False)
    assert fitter.fit(template, question, used) == (used, False)


# ---------------------------------------------------------------------- corpus


def paper_text(i: int, n: int) -> str:
    return "".join(f"P{i} s{j}. " for j in range(n))[:n]


PAPER_LENGTHS = {"p1": 1200, "p2": 800, "p3": 1500, "p4": 900, "p5": 1100, "p6": 700, "p7": 1000}


@pytest.fixture
def corpus_dir(tmp_path: Path) -> Path:
    papers = tuple(
        Paper(id=pid, title=pid.upper(), text=paper_text(int(pid[1]), n))
        for pid, n in PAPER_LENGTHS.items()
    )
    questions = (
        Question(
            id="q1",
            question="Did drug X lower blood pressure?",
            gold_answer="Yes, significantly.",
            must_have=("lowered",),
            paper_ids=("p1",),
            evidence=(EvidenceSpan("p1", 10, 60),),
            gold_label="significantly decreased",
        ),
        Question(
            id="q2",
            question="Did drug Y change weight?",
            gold_answer="No significant difference.",
            must_have=(),
            paper_ids=("p3", "p2"),
            tier="L2",
        ),
        Question(
            id="q3",
            question="What did trial Z find?",
            gold_answer="More relapses.",
            must_have=(),
            paper_ids=("p6",),
            tier="L3",
        ),
    )
    out = tmp_path / "corpus"
    write_canonical(Corpus(name="tiny", papers=papers, questions=questions), out)
    return out


def read(path: Path) -> list[dict]:
    return [r for _, r in iter_jsonl(path)]


def test_base_cell_has_no_context(corpus_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "base.jsonl"
    llm_only_cell("base", corpus_dir, None, 0, out)
    records = read(out)
    assert [r["question_id"] for r in records] == ["q1", "q2", "q3"]
    for r in records:
        assert r["context"] == "" and r["spans"] == [] and r["unit_ids"] == []
        assert r["achieved_chars"] == 0 and r["requested_chars"] is None
        assert r["truncated"] is False and r["top_k"] is None and r["scores"] == []


def test_direct_read_gold_first_then_seeded_filler(corpus_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "dr.jsonl"
    llm_only_cell("direct_read", corpus_dir, 2500, 7, out)
    records = {r["question_id"]: r for r in read(out)}
    texts = {pid: paper_text(int(pid[1]), n) for pid, n in PAPER_LENGTHS.items()}
    for qid, gold in (("q1", ["p1"]), ("q2", ["p3", "p2"]), ("q3", ["p6"])):
        r = records[qid]
        ids = r["unit_ids"]
        assert ids[: len(gold)] == gold  # gold papers first, in the question's order
        assert len(set(ids)) == len(ids)  # no paper twice
        assert not set(ids[len(gold) :]) & set(gold)  # filler is never a gold paper
        assert r["achieved_chars"] == 2500 == r["requested_chars"]
        assert [s[0] for s in r["spans"]] == ids
        assert all(s[1] == 0 for s in r["spans"])  # papers read from their start
        assert sum(s[2] - s[1] for s in r["spans"]) == 2500
        assert r["context"] == "\n\n".join(texts[p][s:e] for p, s, e in r["spans"])
        assert r["truncated"] == (r["spans"][-1][2] < PAPER_LENGTHS[ids[-1]])
    # q2: both gold papers whole (2,300 characters), then 200 characters of one filler paper
    assert records["q2"]["spans"][:2] == [["p3", 0, 1500], ["p2", 0, 800]]
    assert len(records["q2"]["spans"]) == 3 and records["q2"]["spans"][2][1:] == [0, 200]
    assert records["q2"]["truncated"] is True
    # q1: p1 whole, then filler papers whole until the last one is cut
    assert records["q1"]["spans"][0] == ["p1", 0, 1200]

    # a budget smaller than the gold papers: the second gold paper is cut, no filler
    llm_only_cell("direct_read", corpus_dir, 2000, 7, out)
    q2 = {r["question_id"]: r for r in read(out)}["q2"]
    assert q2["spans"] == [["p3", 0, 1500], ["p2", 0, 500]]
    assert q2["achieved_chars"] == 2000 and q2["truncated"] is True


def test_direct_read_is_seeded(corpus_dir: Path, tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    llm_only_cell("direct_read", corpus_dir, 5000, 0, a)
    llm_only_cell("direct_read", corpus_dir, 5000, 0, b)
    assert a.read_bytes() == b.read_bytes()
    orders = {}
    for seed in range(4):
        llm_only_cell("direct_read", corpus_dir, 5000, seed, c)
        orders[seed] = [r["unit_ids"] for r in read(c)]
        assert [ids[0] for ids in orders[seed]] == ["p1", "p3", "p6"]
    assert len({json.dumps(o) for o in orders.values()}) > 1  # another seed, another order


def test_direct_read_budget_beyond_corpus(corpus_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "all.jsonl"
    llm_only_cell("direct_read", corpus_dir, 100_000, 0, out)
    for r in read(out):
        assert sorted(r["unit_ids"]) == sorted(PAPER_LENGTHS)
        assert r["achieved_chars"] == sum(PAPER_LENGTHS.values())
        assert r["truncated"] is False


def test_llm_only_cell_errors(corpus_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs a character budget"):
        llm_only_cell("direct_read", corpus_dir, None, 0, tmp_path / "x.jsonl")
    with pytest.raises(ValueError, match="simple_rag"):
        llm_only_cell("simple_rag", corpus_dir, 1000, 0, tmp_path / "x.jsonl")
    assert not (tmp_path / "x.jsonl").exists()


# ---------------------------------------------------------------------- synthesize_cell


@dataclass
class Stats:
    cache_hits: int = 0
    model_calls: int = 0
    server_started: bool = False


class FakeClient:
    model_name = "synth-x"

    def __init__(self) -> None:
        self.runs: list[tuple[list, str, str]] = []
        self.stats = Stats()

    def run(self, requests, template_hash, desc="LLM calls"):
        self.runs.append((list(requests), template_hash, desc))
        self.stats.model_calls += len(requests)
        return [
            {
                "text": f"answer {i}",
                "prompt_tokens": 100 + i,
                "completion_tokens": 10 + i,
                "latency_s": 0.5,
                "finish_reason": "length" if i == 1 else "stop",
            }
            for i in range(len(requests))
        ]


def test_synthesize_base_cell(corpus_dir: Path, tmp_path: Path) -> None:
    cell = tmp_path / "base.jsonl"
    llm_only_cell("base", corpus_dir, None, 0, cell)
    client = FakeClient()
    out, stats = tmp_path / "answers.jsonl", tmp_path / "stats.json"
    fitter = ContextFitter(None, 2048, 160)
    synthesize_cell(cell, corpus_dir, client, TEMPLATES, fitter, 160, None, out, stats)
    (requests, t_hash, desc) = client.runs[0]
    assert t_hash == template_hash(TEMPLATES["context"], TEMPLATES["base"])
    assert desc == "synthesize base"
    base = TEMPLATES["base"].read_text()
    questions = [
        "Did drug X lower blood pressure?",
        "Did drug Y change weight?",
        "What did trial Z find?",
    ]
    assert [r.messages for r in requests] == [
        [{"role": "user", "content": base.format(question=q)}] for q in questions
    ]
    assert all(r.max_tokens == 160 and r.temperature == 0.0 for r in requests)
    records = read(out)
    assert records[1] == {
        "question_id": "q2",
        "answer": "answer 1",
        "finish_reason": "length",
        "prompt_tokens": 101,
        "completion_tokens": 11,
        "latency_s": 0.5,
        "context_chars": 0,
        "context_chars_used": 0,
        "context_truncated": False,
        "model": "synth-x",
    }
    assert [r["question_id"] for r in records] == ["q1", "q2", "q3"]
    assert json.loads(stats.read_text())["model_calls"] == 3


def test_synthesize_cuts_long_contexts_and_records_it(corpus_dir: Path, tmp_path: Path) -> None:
    cell = tmp_path / "dr.jsonl"
    llm_only_cell("direct_read", corpus_dir, 3000, 0, cell)
    contexts = {r["question_id"]: r["context"] for r in read(cell)}
    client = FakeClient()
    out = tmp_path / "answers.jsonl"
    fitter = ContextFitter(None, 700, 100)  # room for ~2,000 characters of context
    synthesize_cell(cell, corpus_dir, client, TEMPLATES, fitter, 100, 2, out)
    template = TEMPLATES["context"].read_text()
    records = read(out)
    assert [r["question_id"] for r in records] == ["q1", "q2"]  # limit: the first two
    requests = client.runs[0][0]
    for qid, r, req in zip(("q1", "q2"), records, requests, strict=True):
        q_text = {"q1": "Did drug X lower blood pressure?", "q2": "Did drug Y change weight?"}[qid]
        r_tokens = room(fitter, template, q_text)
        assert r["context_chars"] == len(contexts[qid]) > 3000  # separators included
        assert r["context_chars_used"] == (r_tokens - 1) * 4 < r["context_chars"]
        assert r["context_truncated"] is True
        used = contexts[qid][: (r_tokens - 1) * 4]
        assert req.messages == [
            {"role": "user", "content": template.format(question=q_text, context=used)}
        ]
        assert req.max_tokens == 100


def test_synthesize_short_context_used_whole(corpus_dir: Path, tmp_path: Path) -> None:
    cell = tmp_path / "dr.jsonl"
    llm_only_cell("direct_read", corpus_dir, 500, 0, cell)
    client = FakeClient()
    out = tmp_path / "answers.jsonl"
    synthesize_cell(
        cell, corpus_dir, client, TEMPLATES, ContextFitter(None, 2048, 160), 160, 1, out
    )
    (record,) = read(out)
    assert record["context_chars"] == record["context_chars_used"] == 500
    assert record["context_truncated"] is False
    content = client.runs[0][0][0].messages[0]["content"]
    assert content.startswith("You answer questions about scientific papers using only")
    assert paper_text(1, 500) in content


def test_synthesize_missing_context_is_an_error(corpus_dir: Path, tmp_path: Path) -> None:
    cell = tmp_path / "partial.jsonl"
    cell.write_text(
        json.dumps({"question_id": "q1", "context": ""}) + "\n",
        encoding="utf-8",
    )
    with pytest.raises(ValueError, match=r"no context for questions \['q2', 'q3'\]"):
        synthesize_cell(
            cell,
            corpus_dir,
            FakeClient(),
            TEMPLATES,
            ContextFitter(None, 2048, 160),
            160,
            None,
            tmp_path / "a.jsonl",
        )
    assert not (tmp_path / "a.jsonl").exists()


def test_store_cells_answer_exactly_their_slice_questions(corpus_dir: Path, tmp_path: Path) -> None:
    """A store system's cell holds the memory slice's questions (q2, q3 here): with
    cell_questions those and only those are answered, whatever the first-N limit says."""
    cell = tmp_path / "slice.jsonl"
    cell.write_text(
        "".join(json.dumps({"question_id": q, "context": "a fact"}) + "\n" for q in ("q3", "q2")),
        encoding="utf-8",
    )
    client = FakeClient()
    out = tmp_path / "a.jsonl"
    fitter = ContextFitter(None, 2048, 160)
    synthesize_cell(cell, corpus_dir, client, TEMPLATES, fitter, 160, 1, out, cell_questions=True)
    assert [r["question_id"] for r in read(out)] == ["q2", "q3"]  # corpus order
    with pytest.raises(ValueError, match=r"no context for questions \['q1'\]"):
        synthesize_cell(cell, corpus_dir, client, TEMPLATES, fitter, 160, 1, tmp_path / "b.jsonl")
