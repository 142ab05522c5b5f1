"""Request bodies, validated before anything reaches the engine. Fields follow OpenAI's API and
llama-server's extras (its sampling parameters, ``grammar``, ``lora``, ``n_predict``); fields
neither knows are ignored, as llama-server ignores them."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    StrictBool,
    StrictInt,
    StrictStr,
    create_model,
    field_validator,
)

from llama_ffi.high.request_fields import LOGPROBS, MAX_TOKENS, TOP_LOGPROBS, N
from llama_ffi.high.sampling_fields import FIELDS, SamplingField

TokenList = list[StrictInt]
Prompt = Union[StrictStr, TokenList, list[StrictStr], list[TokenList]]  # noqa: UP007 - evaluated at import, on 3.9 too
NonNegative = Annotated[float, Field(ge=0)]


class Body(BaseModel):
    model_config = ConfigDict(extra="ignore", protected_namespaces=())


class StreamOptions(Body):
    include_usage: StrictBool = False


class LoraChoice(Body):
    id: StrictInt = Field(ge=0)
    scale: float


class LoraScales(RootModel[list[LoraChoice]]):
    """POST /lora-adapters: a bare list of ``{"id", "scale"}``."""

    @property
    def lora(self) -> list[LoraChoice]:
        return self.root


def _knob(field: SamplingField):
    # no bounds here: llama-server clamps some values (params.generation_request) and the library
    # refuses the rest by name
    return (Optional[StrictInt] if field.kind is int else Optional[float]), None  # noqa: UP045 - evaluated


# The sampling parameters (``sampling_fields``), under llama-server's keys.
Knobs = create_model("Knobs", __base__=Body, **{f.key: _knob(f) for f in FIELDS})


class Sampling(Knobs):
    """What every generating endpoint takes: OpenAI's names and llama-server's extras."""

    model: StrictStr | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    n: StrictInt = Field(1, **N.bounds())
    max_tokens: StrictInt | None = Field(None, **MAX_TOKENS.bounds())
    n_predict: StrictInt | None = Field(None, ge=-1)
    stop: StrictStr | list[StrictStr] | None = None
    seed: StrictInt | None = None
    dry_sequence_breakers: list[StrictStr] | None = None
    logit_bias: dict[str, float | StrictBool] | list[list[Any]] | None = None
    grammar: StrictStr | None = None  # GBNF, or a Lark grammar after "%llguidance {}" (llama-server's)
    # vLLM's constraints: structured_outputs {json, regex, choice, grammar}, and their older names
    structured_outputs: dict[str, Any] | None = None
    guided_json: dict[str, Any] | StrictStr | None = None
    guided_regex: StrictStr | None = None
    guided_choice: list[StrictStr] | None = None
    guided_grammar: StrictStr | None = None
    ignore_eos: StrictBool = False
    lora: list[LoraChoice] | None = None
    timings_per_token: StrictBool = False  # llama-server's: speeds on a stream's usage chunk
    return_progress: StrictBool = False  # llama-server's: prompt_progress chunks in a stream
    id_slot: StrictInt = -1  # llama-server's: the slot (and its cache) the prompt uses; -1 any
    cache_prompt: StrictBool = True  # llama-server's; every slot keeps its cache here

    @field_validator("n_predict")
    @classmethod
    def _n_predict(cls, value: int | None) -> int | None:
        if value == 0:
            raise ValueError("n_predict must be -1 (until the context is full) or >= 1")
        return value


class CompletionRequest(Sampling):
    prompt: Prompt
    echo: StrictBool = False
    logprobs: StrictInt | None = Field(None, **LOGPROBS.bounds())
    suffix: StrictStr | None = None


class ChatRequest(Sampling):
    messages: list[dict[str, Any]]  # may be empty (llama-server's rule): the template alone
    max_completion_tokens: StrictInt | None = Field(None, **MAX_TOKENS.bounds())
    logprobs: StrictBool | None = None
    top_logprobs: StrictInt | None = Field(None, **TOP_LOGPROBS.bounds())
    response_format: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: StrictStr | dict[str, Any] | None = None
    parallel_tool_calls: StrictBool = False  # llama-server's default: one call unless asked for more
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_budget: StrictInt | None = Field(None, ge=-1)
    add_generation_prompt: StrictBool | None = None
    continue_final_message: StrictBool | None = None  # vLLM's name of llama-server's prefill
    verbose: StrictBool = False  # llama-server's: the rendered prompt in "__verbose"
    json_schema: dict[str, Any] | None = None  # llama-server's: the answer follows this schema


class InfillRequest(Sampling):
    input_prefix: StrictStr = ""
    input_suffix: StrictStr = ""
    input_extra: list[dict[str, Any]] | None = None
    prompt: StrictStr = ""


class EmbeddingRequest(Body):
    model: StrictStr | None = None
    input: Any = None  # text, token ids, a mix, {"content": [...]} objects, or a list of those
    content: Any = None  # llama-server's name of input
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: StrictInt | None = Field(None, ge=1)


class RerankRequest(Body):
    model: StrictStr | None = None
    query: StrictStr
    documents: list[StrictStr] | None = None
    texts: list[StrictStr] | None = None  # Text Embeddings Inference's name of documents
    top_n: StrictInt | None = Field(None, ge=1)
    return_documents: StrictBool = False


class TokenizeRequest(Body):
    content: StrictStr
    add_special: StrictBool = False
    parse_special: StrictBool = True
    with_pieces: StrictBool = False


class DetokenizeRequest(Body):
    tokens: TokenList
