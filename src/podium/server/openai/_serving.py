"""What chat and text completions share: finding the model, building each choice's
:class:`~podium.openai.Sampling`, and the context-length rule.

``model`` names a Podium model (its default version), or ``name@version`` one version of it:
a name that is a model is always that model, so only names with an ``@`` that no model has are
split (at the last ``@``).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, NamedTuple

from ...errors import NotFound
from ...types import OpenAIFace
from ._contract import Sampling
from ._protocol import OpenAIInvalid
from ._tokens import TextCodec

if TYPE_CHECKING:
    from ...dataplane import DataPlane, ModelVersion
    from ._protocol import ChatCompletionRequest, CompletionRequest

__all__ = [
    "MAX_CHOICES",
    "Target",
    "face_of",
    "resolve",
    "samplings",
    "serves",
    "split",
    "target",
    "texts_or_ids",
    "token_limit",
]

#: The most choices one request may ask for (``n`` × prompts), so that one request cannot fill
#: every batch.
MAX_CHOICES = 128


class Target(NamedTuple):
    """The model version a request names, what it offers OpenAI's API, and its tokenizer."""

    mv: ModelVersion
    face: OpenAIFace
    codec: TextCodec | None


#: Each tokenizer as the server uses it (its piece cache lives as long as the tokenizer).
_codecs: weakref.WeakKeyDictionary[Any, TextCodec] = weakref.WeakKeyDictionary()


def face_of(mv: ModelVersion) -> OpenAIFace | None:
    """What the loaded version offers OpenAI's API (None: nothing; or it runs in worker
    processes, whose instances the front end cannot reach)."""
    face = getattr(mv.instance, "openai", None)
    return face if isinstance(face, OpenAIFace) else None


def serves(mv: ModelVersion) -> bool:
    """Whether the loaded version serves OpenAI's API (it generates, or it embeds: in worker
    processes too, where the front end sees its capabilities only)."""
    return face_of(mv) is not None or mv.instance.capabilities.embeds


def split(plane: DataPlane, name: str) -> tuple[str, str | None]:
    """The model and the version (None: its default) that ``name`` names."""
    known = {mv.name for mv in plane.versions()}
    if name in known or "@" not in name:
        return name, None
    model, _, version = name.rpartition("@")
    return model, version


def resolve(plane: DataPlane, name: str) -> ModelVersion:
    """The ready version ``name`` names: ``NotFound`` (404), ``ModelNotReady`` (503)."""
    return plane.resolve(*split(plane, name))


def target(plane: DataPlane, name: str, what: str) -> Target:
    """The ready version ``name`` names that does ``what`` (``generates``, ``embeds``, or
    ``methods``: its own chat / complete)."""
    mv = resolve(plane, name)
    face = face_of(mv)
    if face is None and what == "embeds" and mv.instance.capabilities.embeds:
        face = OpenAIFace(embeds=True)  # in worker processes: embed is there, its tokenizer not
    if face is None or not getattr(face, what):
        doing = "embed text" if what == "embeds" else "generate text"
        rule = (
            "a continuous_batching model that sets self.tokenizer in load()"
            if what == "generates"
            else "a model that defines embed(self, inputs)"
        )
        raise NotFound(
            f"model '{mv.name}' does not {doing} on OpenAI's API (that takes {rule}; "
            "docs/openai.md)"
        )
    codec = None
    if face.tokenizer is not None:
        try:
            codec = _codecs.get(face.tokenizer)
            if codec is None:
                codec = _codecs[face.tokenizer] = TextCodec(face.tokenizer, mv.name)
        except TypeError:  # a tokenizer that takes no weak reference: a codec per request
            codec = TextCodec(face.tokenizer, mv.name)
    return Target(mv, face, codec)


def token_limit(t: Target, prompt: int, asked: int | None, param: str, prompt_param: str) -> int:
    """The completion's ``max_tokens``: what was asked, else what the context leaves; 400 when
    the prompt and the completion do not fit the model's context."""
    context = t.face.context_length or 0
    if prompt >= context:
        raise OpenAIInvalid(
            f"This model's maximum context length is {context} tokens. However, your prompt "
            f"has {prompt} tokens, which leaves no room for a completion",
            prompt_param,
        )
    if asked is None:
        return context - prompt
    if prompt + asked > context:
        raise OpenAIInvalid(
            f"This model's maximum context length is {context} tokens. However, you requested "
            f"{prompt + asked} tokens ({prompt} in the prompt, {asked} in the completion); "
            f"reduce the prompt or '{param}'",
            param,
        )
    return asked


def samplings(
    request: ChatCompletionRequest | CompletionRequest,
    prompt: list[int],
    max_tokens: int,
    first_index: int,
    *,
    logprobs: int | None,
    prompt_logprobs: int | None = None,
) -> list[Sampling]:
    """The request's ``n`` choices of one prompt, indexed from ``first_index``."""
    temperature = 1.0 if request.temperature is None else request.temperature
    out = []
    for i in range(request.n):
        seed = None if request.seed is None else request.seed + i
        out.append(
            Sampling(
                prompt_token_ids=prompt,
                max_tokens=max_tokens,
                temperature=temperature,
                top_p=1.0 if request.top_p is None else request.top_p,
                top_k=request.top_k or 0,
                seed=seed,
                logprobs=logprobs,
                prompt_logprobs=prompt_logprobs,
                presence_penalty=request.presence_penalty,
                frequency_penalty=request.frequency_penalty,
                ignore_eos=request.ignore_eos,
                index=first_index + i,
            )
        )
    return out


def texts_or_ids(value: str | list[Any]) -> list[str | list[int]]:
    """A ``prompt`` or ``input`` (checked by ``decode``: a string, strings, token ids or lists of
    token ids) as its texts, or as its lists of token ids."""
    if isinstance(value, str):
        return [value]
    if all(isinstance(item, str) for item in value):
        return list(value)
    return [list(value)] if all(type(item) is int for item in value) else list(value)


def check_choices(count: int) -> None:
    if count > MAX_CHOICES:
        raise OpenAIInvalid(
            f"the request asks for {count} choices ('n' times the prompts); at most "
            f"{MAX_CHOICES} are served per request",
            "n",
        )
