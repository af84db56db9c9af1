"""Generating choices on the data plane: each choice one continuous-batching request whose
inputs are its :class:`~podium.openai.Sampling`, its tokens turned into text as they come.

:class:`Choice` keeps one choice's state: its detokenizer, its stop strings, its tokens and
their logprobs, its usage and its ``finish_reason``; :func:`pieces` runs the choices of one
request and yields what each produces (:class:`Piece`), interleaved as they come, and counts the
request in its version's token statistics once it is over. A choice that is over for the server
(``max_tokens`` reached, a stop string seen) or whose client has gone is closed: the scheduler
takes it out of the batch before the next step. :class:`Job` is what chat's and completions'
requests hold besides their choices: the response's ``id``, its head and its usage.

The rule for ``finish_reason``: ``stop`` where a stop string appeared, or where the model ended
the choice with its EOS or one of ``stop_token_ids`` as the last token; ``length`` where the
choice reached ``max_tokens``; else (the model ended it otherwise) ``stop``.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import BadModelOutput
from ...types import Call, WireProtocol
from ._contract import PromptLogprobs, Sampling, Token
from ._serving import Target
from ._tokens import Detokenizer, StopText, TextCodec

if TYPE_CHECKING:
    from ...dataplane import DataPlane, ModelVersion

__all__ = ["Choice", "Job", "Piece", "pieces", "started"]

_now = time.perf_counter_ns


@dataclass(slots=True)
class Piece:
    """What one choice produced since its last piece: ``text``, the ``tokens`` that text holds
    (with their logprobs), the prompt's logprobs (once, first, where asked) and, in its last
    piece, ``finish_reason``."""

    index: int
    text: str = ""
    tokens: Sequence[Token] = ()
    prompt_logprobs: PromptLogprobs | None = None
    finish_reason: str | None = None


class Choice:
    """One choice of a request: what it asks (``sampling``), what it has produced."""

    __slots__ = (
        "sampling",
        "detok",
        "stop",
        "count",
        "finish_reason",
        "_pending",
        "_stop_ids",
        "start_ns",
        "first_ns",
        "last_ns",
        "model",
    )

    def __init__(
        self, sampling: Sampling, codec: TextCodec, stop: str | list[str] | None, model: str
    ) -> None:
        self.sampling = sampling
        self.model = model
        self.detok = Detokenizer(codec, sampling.prompt_token_ids)
        self.stop = StopText(stop)
        self.count = 0
        self.finish_reason: str | None = None
        self._pending: list[tuple[Token, int]] = []  # tokens not yet released, where each starts
        stop_ids = set(sampling.stop_token_ids)
        if not sampling.ignore_eos:
            stop_ids |= codec.eos
        self._stop_ids = frozenset(stop_ids)
        self.start_ns = _now()
        self.first_ns = 0
        self.last_ns = 0

    @property
    def index(self) -> int:
        return self.sampling.index

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def add(self, item: Any) -> Piece | None:
        """One item the model emitted for this choice; the piece it makes (None: nothing yet)."""
        if type(item) is int:
            item = Token(item)
        elif type(item) is PromptLogprobs:
            if self.sampling.max_tokens <= self.count:  # only the prompt's logprobs were asked
                self.finish_reason = "length"
            return Piece(self.index, prompt_logprobs=item, finish_reason=self.finish_reason)
        elif type(item) is not Token:
            raise BadModelOutput(
                f"model '{self.model}' emitted a {type(item).__name__} for an OpenAI completion; "
                "step must emit a podium.openai.Token (or an int token id) per generation"
            )
        now = _now()
        if not self.count:
            self.first_ns = now
        self.last_ns = now
        self.count += 1
        self._pending.append((item, len(self.stop.text)))
        text = self.stop.add(self.detok.add(item.id))
        if self.stop.stopped:
            self.finish_reason = "stop"
            text += self.stop.flush()
        elif self.count >= self.sampling.max_tokens:
            self.finish_reason = "stop" if item.id in self._stop_ids else "length"
            text += self.stop.flush()
        tokens = self._release()
        if not text and not tokens and self.finish_reason is None:
            return None
        return Piece(self.index, text, tokens, finish_reason=self.finish_reason)

    def end(self) -> Piece:
        """The model ended the choice: the text held back, and the finish_reason."""
        if self.finish_reason is None:
            if self.count >= self.sampling.max_tokens:
                self.finish_reason = "length"
            else:
                self.finish_reason = "stop"
        text = self.stop.flush()
        return Piece(self.index, text, self._release(True), finish_reason=self.finish_reason)

    def _release(self, everything: bool = False) -> list[Token]:
        """The tokens whose text has gone out (all of them at the end, but those after a stop
        string)."""
        pending = self._pending
        if self.stop.stopped:
            out = [t for t, start in pending if start < len(self.stop.text)]
            pending.clear()
            return out
        upto = self.stop.released
        count = len(pending) if everything else sum(start < upto for _, start in pending)
        out = [t for t, _ in pending[:count]]
        del pending[:count]
        return out


async def _one(plane: DataPlane, mv: ModelVersion, choice: Choice) -> AsyncGenerator[Piece, None]:
    sampling = choice.sampling
    if sampling.max_tokens == 0 and sampling.prompt_logprobs is None:
        yield choice.end()  # nothing to ask the model
        return
    stream = plane.stream(Call(mv.name, mv.version, WireProtocol.OPENAI, sampling, None), mv)
    try:
        async for item in stream:
            piece = choice.add(item)
            if piece is not None:
                yield piece
            if choice.done:
                return  # closing the stream takes the generation out of the batch
        yield choice.end()
    finally:
        await stream.aclose()


async def pieces(
    plane: DataPlane, mv: ModelVersion, choices: list[Choice], prompt_tokens: int
) -> AsyncGenerator[Piece, None]:
    """The pieces of every choice, in the order they come; the choices run side by side (each
    a request of the model's continuous batch, pumped by a task of its own). Leaving early
    closes every choice. At the end the request (``prompt_tokens`` and its choices) is counted
    in ``mv``'s token statistics."""
    # A bounded handoff: a slow reader holds the choices back, as one choice's stream would be.
    queue: asyncio.Queue[Piece | BaseException | None] = asyncio.Queue(len(choices))

    async def pump(choice: Choice) -> None:
        gen = _one(plane, mv, choice)
        try:
            async for piece in gen:
                await queue.put(piece)
            await queue.put(None)
        except Exception as exc:
            await queue.put(exc)
        finally:
            await gen.aclose()

    tasks = [asyncio.create_task(pump(choice)) for choice in choices]
    try:
        running = len(tasks)
        while running:
            got = await queue.get()
            if got is None:
                running -= 1
            elif isinstance(got, BaseException):
                raise got
            else:
                yield got
    finally:
        for task in tasks:
            task.cancel()
        _record(mv, prompt_tokens, choices)  # (a cancelled pump adds no token)
        await asyncio.gather(*tasks, return_exceptions=True)


def _record(mv: ModelVersion, prompt_tokens: int, choices: list[Choice]) -> None:
    """Count one finished request in its version's token statistics (its metrics)."""
    stats = mv.stats.tokens
    stats.prompt += prompt_tokens
    first = 0
    for choice in choices:
        stats.generated += choice.count
        reason = choice.finish_reason or "abort"
        stats.finished[reason] = stats.finished.get(reason, 0) + 1
        if choice.count:
            if not first or choice.first_ns < first:
                first = choice.first_ns
            if choice.count > 1:
                per = (choice.last_ns - choice.first_ns) // (choice.count - 1)
                stats.per_token.add(per)
    if first:
        stats.first_token.add(first - min(c.start_ns for c in choices))


async def started(gen: AsyncGenerator[Piece, None]) -> AsyncGenerator[Piece, None]:
    """``gen`` with its first piece awaited now (a request the model's queue refuses fails before
    a stream says anything)."""
    first = await gen.__anext__()

    async def rest() -> AsyncGenerator[Piece, None]:
        yield first
        async for piece in gen:
            yield piece

    return rest()


class Job:
    """One chat or completions request, checked and tokenized: its choices (which the
    request's own class adds), the response's ``id`` and ``created``, and what its stream
    reports (``stream_options``)."""

    def __init__(self, request: Any, t: Target, prefix: str, prompt_tokens: int) -> None:
        self.request = request
        self.target = t
        self.prompt_tokens = prompt_tokens
        self.choices: list[Choice] = []
        self.id = f"{prefix}-{secrets.token_hex(12)}"
        self.created = int(time.time())
        options = request.stream_options
        self.include_usage = options is not None and options.include_usage
        self.continuous = self.include_usage and options.continuous_usage_stats

    @property
    def codec(self) -> TextCodec:
        """The model's tokenizer (a generating model has one)."""
        assert self.target.codec is not None
        return self.target.codec

    def head(self, kind: str) -> dict[str, Any]:
        """What every object of the response begins with; ``kind``: its ``object``."""
        return {"id": self.id, "object": kind, "created": self.created, "model": self.request.model}

    def usage(self, completion: int | None = None) -> dict[str, Any]:
        """The tokens of the prompts and of the ``completion`` (default: every choice's so far)."""
        if completion is None:
            completion = sum(c.count for c in self.choices)
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
        }

    def pieces(self, plane: DataPlane) -> AsyncGenerator[Piece, None]:
        """What the choices produce, as they come (the model's generations)."""
        return pieces(plane, self.target.mv, self.choices, self.prompt_tokens)
