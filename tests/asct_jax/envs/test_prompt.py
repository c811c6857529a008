"""asct_jax.envs.prompt: the feedback frame's text (`render_feedback`, exactly the module
docstring's one user message), its words (`feedback_words`, as the tokenizers Whitespace
pre-tokenizer splits the lower-cased text, first use order, no repeats) and their ids in
the word vocabulary (the PromptTokens docstring's default frame), the static pieces'
defaults, equality and hashing (static values under jit: GenerationPieces' tokenizer is
not part of either), and `GenerationPieces.fixed_len` against the layout counted piece by
piece."""
import dataclasses

import pytest
from hypothesis import given, strategies as st
from tokenizers import pre_tokenizers

import asct_jax.envs  # noqa: F401  (installs the environments' words in the tokenizer)
from asct_jax.envs import prompt as P
from asct_jax.envs.base import PAD_ID, SEP_ID
from asct_jax.envs.tokenizer import decode, get_tokenizer, word_feedback_frame

TEXT = st.text(alphabet="ab c:\n.", max_size=12)
IDS = st.lists(st.integers(5, 50), max_size=4).map(tuple)


def test_feedback_frame_text_is_the_docstrings_user_message():
    assert P.render_feedback("Task: x", "ok") == (
        "Task: x\n\nImmediate feedback from the current step:\nok"
        "\n\nCorrectly solve the current task.\n")
    assert P.render_feedback("", "") == P.FEEDBACK_TITLE + P.FEEDBACK_INSTRUCTION


@given(prompt=TEXT, feedback=TEXT)
def test_render_feedback_puts_the_feedback_between_title_and_instruction(prompt, feedback):
    text = P.render_feedback(prompt, feedback)
    head = prompt + P.FEEDBACK_TITLE
    assert text.startswith(head) and text.endswith(P.FEEDBACK_INSTRUCTION)
    assert text[len(head): len(text) - len(P.FEEDBACK_INSTRUCTION)] == feedback


def test_feedback_words_are_the_whitespace_pre_tokenizers_words_once_in_order():
    text = (P.FEEDBACK_TITLE + P.FEEDBACK_INSTRUCTION).lower()
    split = [w for w, _ in pre_tokenizers.Whitespace().pre_tokenize_str(text)]
    want = []
    for w in split:
        if w not in want:
            want.append(w)
    assert P.feedback_words() == tuple(want)
    assert P.feedback_words() == ("immediate", "feedback", "from", "the", "current", "step",
                                  ":", "correctly", "solve", "task", ".")
    assert all(w == w.lower() for w in P.feedback_words())


def test_every_feedback_word_is_one_word_of_the_environment_vocabulary():
    vocab = get_tokenizer().get_vocab()
    assert all(w in vocab for w in P.feedback_words())
    frame = word_feedback_frame(get_tokenizer())
    # the PromptTokens docstring's default frame: every newline a SEP, lower case
    assert decode(frame.header) == "<sep> <sep> immediate feedback from the current step : <sep>"
    assert decode(frame.footer) == "<sep> <sep> correctly solve the current task . <sep>"
    assert frame.header[:2] == (SEP_ID, SEP_ID) and frame.footer[-1] == SEP_ID
    assert frame.strip == 0


def test_prompt_tokens_defaults_are_the_word_vocabularys():
    t = P.PromptTokens()
    assert t.pad_id == PAD_ID and t.action_header == () and t.generation is None
    assert t.feedback_frame is None                      # the word vocabulary's frame
    assert t.appended_frame == P.FeedbackFrame(header=(SEP_ID,), footer=(), strip=0)
    f = P.FeedbackFrame()
    assert (f.header, f.footer, f.strip) == ((), (), 0)
    g = P.GenerationPieces()
    assert g.list_header == g.item_sep == (SEP_ID,)      # "history x_t SEP c_1 SEP ..."
    assert (g.head, g.obs_label, g.act_label, g.cur_label, g.tail) == ((),) * 5
    assert (g.strip_head, g.strip_tail, g.tags, g.stop_id, g.tokenizer) == (0, 0, None, None,
                                                                            None)


def test_pieces_are_frozen_and_hashable_static_values():
    for obj in (P.FeedbackFrame(header=(4,)), P.PromptTokens(), P.GenerationPieces()):
        with pytest.raises(dataclasses.FrozenInstanceError):
            obj.__setattr__(dataclasses.fields(obj)[0].name, None)
        assert hash(obj) == hash(dataclasses.replace(obj)) and obj == dataclasses.replace(obj)
    a = P.PromptTokens(feedback_frame=P.FeedbackFrame(header=(4, 5), footer=(6,), strip=2))
    b = P.PromptTokens(feedback_frame=P.FeedbackFrame(header=(4, 5), footer=(6,), strip=2))
    c = P.PromptTokens(feedback_frame=P.FeedbackFrame(header=(4, 5), footer=(6,), strip=1))
    assert a == b and hash(a) == hash(b) and a != c


def test_generation_pieces_ignore_the_tokenizer_in_equality_hash_and_repr():
    class Unhashable:
        __hash__ = None

        def __repr__(self):
            return "TOKENIZER"

    plain = P.GenerationPieces(head=(7,))
    with_tok = P.GenerationPieces(head=(7,), tokenizer=Unhashable())
    assert with_tok == plain and hash(with_tok) == hash(plain)
    assert "TOKENIZER" not in repr(with_tok) and "tokenizer" not in repr(with_tok)
    assert P.GenerationPieces(head=(8,), tokenizer=Unhashable()) != plain


def _layout_len(g, history):
    """Tokens of the layout's own pieces (x_i, a_i, c_k, the action tags and the per-item
    separators left out): head [obs_label x act_label <action> a </action>]_{i<t} cur_label
    x_t list_header (c_k item_sep)_k tail."""
    tokens = list(g.head)
    for _ in range(history):
        tokens += list(g.obs_label) + ["x"] + list(g.act_label) + ["a"]
    tokens += list(g.cur_label) + ["x"] + list(g.list_header) + ["c"] + list(g.tail)
    return sum(not isinstance(t, str) for t in tokens)


@given(head=IDS, obs_label=IDS, act_label=IDS, cur_label=IDS, list_header=IDS, item_sep=IDS,
       tail=IDS, history=st.integers(0, 5))
def test_fixed_len_counts_the_layouts_pieces(head, obs_label, act_label, cur_label,
                                             list_header, item_sep, tail, history):
    g = P.GenerationPieces(head=head, obs_label=obs_label, act_label=act_label,
                           cur_label=cur_label, list_header=list_header, item_sep=item_sep,
                           tail=tail, strip_head=3, strip_tail=2)
    assert g.fixed_len(history) == _layout_len(g, history)


def test_fixed_len_of_the_default_pieces_is_the_list_header():
    assert [P.GenerationPieces().fixed_len(h) for h in range(4)] == [1, 1, 1, 1]
    g = P.GenerationPieces(head=(1, 2), obs_label=(3,), act_label=(4, 5), cur_label=(6,),
                           list_header=(), tail=(7, 8, 9))
    assert [g.fixed_len(h) for h in range(3)] == [6, 9, 12]
