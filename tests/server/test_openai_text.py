"""The OpenAI front end's text machinery, without a server: incremental detokenization (also of
byte-level BPE tokens that end inside a UTF-8 character), stop strings across token boundaries,
a choice's pieces and finish_reason, and the tool-call rule."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from podium.errors import BadModelOutput
from podium.openai import PromptLogprobs, Sampling, Token
from podium.server.openai._generate import Choice
from podium.server.openai._tokens import Detokenizer, StopText, TextCodec
from podium.server.openai._tools import could_be_call, parse_tool_calls

TEXT = "héllo wörld, 世界 says hello to the 🌍 world; naïve café crème brûlée"


@pytest.fixture(scope="module")
def byte_level() -> Tokenizer:
    """A small byte-level BPE (GPT-2's scheme) trained here: its tokens split UTF-8 characters."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<eos>"],
    )
    tok.train_from_iterator([TEXT] * 20, trainer=trainer)
    return tok


def test_incremental_text_equals_the_whole_decode(byte_level: Tokenizer) -> None:
    codec = TextCodec(byte_level, "m")
    ids = codec.encode(TEXT)
    assert any("\ufffd" in codec.decode([i]) for i in ids)  # some tokens end mid-character
    detok = Detokenizer(codec, codec.encode("prompt: "))
    pieces = [detok.add(i) for i in ids]
    assert "".join(pieces) == TEXT
    assert all("\ufffd" not in p for p in pieces)


@pytest.mark.parametrize(
    ("deltas", "stops", "text", "stopped"),
    [
        (["Hel", "lo th", "ere"], ["o t"], "Hell", True),
        (list("Hello there"), ["there"], "Hello ", True),
        (list("Hello there"), ["xyz"], "Hello there", False),
        (["ab", "cd"], ["bc", "d"], "a", True),
        (list("abc"), [], "abc", False),
    ],
)
def test_stop_strings_found_across_deltas(
    deltas: list[str], stops: list[str], text: str, stopped: bool
) -> None:
    stop = StopText(stops)
    out = "".join(stop.add(d) for d in deltas) + stop.flush()
    assert out == text and stop.stopped is stopped


def test_stop_text_holds_back_only_what_may_begin_a_stop() -> None:
    stop = StopText(["END"])
    assert stop.add("abcE") == "ab"  # "cE" might begin "END"
    assert stop.add("x") == "c"  # "Ex" still might
    assert stop.flush() == "Ex" and not stop.stopped


def _codec(byte_level: Tokenizer) -> TextCodec:
    return TextCodec(byte_level, "m")


def test_a_choice_ends_by_length_stop_string_or_the_model(byte_level: Tokenizer) -> None:
    codec = _codec(byte_level)
    ids = codec.encode("hello world")
    choice = Choice(Sampling([1], max_tokens=3), codec, [], "m")
    pieces = [choice.add(Token(i)) for i in ids[:3]]
    assert pieces[-1] is not None and pieces[-1].finish_reason == "length"
    choice = Choice(Sampling([1], max_tokens=50), codec, ["wor"], "m")
    texts = []
    for i in ids:
        piece = choice.add(i)  # a plain int is a token id
        if piece is not None:
            texts.append(piece.text)
        if choice.done:
            break
    assert "".join(texts) == "hello " and choice.finish_reason == "stop"
    choice = Choice(Sampling([1], max_tokens=50), codec, [], "m")
    for i in ids:
        choice.add(i)
    assert choice.end().finish_reason == "stop"


def test_tokens_go_out_with_their_text_and_stop_drops_the_rest(byte_level: Tokenizer) -> None:
    codec = _codec(byte_level)
    ids = codec.encode("hello world hello world")
    choice = Choice(Sampling([1], max_tokens=50), codec, ["world"], "m")
    released = []
    for i in ids:
        piece = choice.add(Token(i, -1.0))
        if piece is not None:
            released += [t.id for t in piece.tokens]
        if choice.done:
            break
    # the token the stop string begins in goes out (its text is partly kept); none after it
    assert codec.decode(released) == "hello world"
    assert choice.stop.text == "hello "


def test_prompt_logprobs_and_bad_items(byte_level: Tokenizer) -> None:
    codec = _codec(byte_level)
    choice = Choice(Sampling([1, 2], max_tokens=0, prompt_logprobs=0), codec, [], "m")
    piece = choice.add(PromptLogprobs([None, -1.0]))
    assert piece is not None and piece.finish_reason == "length"
    with pytest.raises(BadModelOutput, match="step must emit a podium.openai.Token"):
        Choice(Sampling([1], max_tokens=5), codec, [], "m").add("text")


TOOLS = {"get_weather", "get_time"}


def test_tool_calls_in_hermes_blocks_and_whole_json() -> None:
    text = (
        'Sure. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
        '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    )
    content, calls = parse_tool_calls(text, TOOLS)
    assert content == "Sure."
    assert [c["function"]["name"] for c in calls] == ["get_weather", "get_time"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Paris"}
    assert all(c["id"].startswith("call_") and c["type"] == "function" for c in calls)
    content, calls = parse_tool_calls('{"name": "get_time", "parameters": {"tz": "UTC"}}', TOOLS)
    assert content is None and json.loads(calls[0]["function"]["arguments"]) == {"tz": "UTC"}
    # a function the request did not offer, or plain text: content, no calls
    assert parse_tool_calls('{"name": "rm_rf", "arguments": {}}', TOOLS)[1] == []
    assert parse_tool_calls("just words", TOOLS) == ("just words", [])
    # a named tool_choice: a bare object is its arguments
    _, calls = parse_tool_calls('{"city": "Oslo"}', TOOLS, "get_weather")
    assert calls[0]["function"]["name"] == "get_weather"


def test_what_a_stream_holds_back_while_it_may_be_a_call() -> None:
    assert could_be_call("") and could_be_call("  {") and could_be_call("<tool")
    assert could_be_call("<tool_call>{") and not could_be_call("Hello")
    assert not could_be_call("<b>bold</b>")


def test_a_transformers_tokenizer_decodes_as_it_would_itself(byte_level: Tokenizer) -> None:
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=byte_level, eos_token="<eos>")
    codec = TextCodec(tok, "m")
    ids = codec.encode(TEXT) + [tok.eos_token_id]
    assert codec.decode(ids) == tok.decode(ids, skip_special_tokens=True) == TEXT
    assert codec.eos == {tok.eos_token_id}
    detok = Detokenizer(codec, [])
    assert "".join(detok.add(i) for i in ids) == TEXT
