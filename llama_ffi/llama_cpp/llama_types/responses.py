"""The response shapes: embeddings, completions, chat completions and their stream chunks."""

from typing import Any, Dict, List, Literal, Optional, TypedDict, Union

JsonType = Union[None, int, str, bool, List[Any], Dict[str, Any]]

# ---- embeddings -------------------------------------------------------------------------------------


class EmbeddingUsage(TypedDict):
    prompt_tokens: int
    total_tokens: int


class Embedding(TypedDict):
    index: int
    object: str
    embedding: Union[List[float], List[List[float]]]


class CreateEmbeddingResponse(TypedDict):
    object: Literal["list"]
    model: str
    data: List[Embedding]
    usage: EmbeddingUsage


# ---- completions ------------------------------------------------------------------------------------


class CompletionLogprobs(TypedDict):
    text_offset: List[int]
    token_logprobs: List[Optional[float]]
    tokens: List[str]
    top_logprobs: List[Optional[Dict[str, float]]]


class CompletionChoice(TypedDict):
    text: str
    index: int
    logprobs: Optional[CompletionLogprobs]
    finish_reason: Optional[Literal["stop", "length", "content_filter"]]


class PromptTokensDetails(TypedDict, total=False):
    cached_tokens: int
    audio_tokens: int


class CompletionTokensDetails(TypedDict, total=False):
    reasoning_tokens: int
    audio_tokens: int
    accepted_prediction_tokens: int
    rejected_prediction_tokens: int


class _CompletionUsageDetails(TypedDict, total=False):
    prompt_tokens_details: PromptTokensDetails
    completion_tokens_details: CompletionTokensDetails


class CompletionUsage(_CompletionUsageDetails):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class _CreateCompletionResponseUsage(TypedDict, total=False):
    usage: CompletionUsage


class CreateCompletionResponse(_CreateCompletionResponseUsage):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: List[CompletionChoice]


# ---- chat completion responses ----------------------------------------------------------------------


class ChatCompletionResponseFunctionCall(TypedDict):
    name: str
    arguments: str


ChatCompletionResponseMessageFunctionCall = ChatCompletionResponseFunctionCall


class ChatCompletionResponseMessageAudio(TypedDict):
    id: str
    data: str
    expires_at: int
    transcript: str


class ChatCompletionResponseMessageAnnotationURLCitation(TypedDict):
    start_index: int
    end_index: int
    url: str
    title: str


class ChatCompletionResponseMessageAnnotation(TypedDict):
    type: Literal["url_citation"]
    url_citation: ChatCompletionResponseMessageAnnotationURLCitation


class ChatCompletionMessageToolCallFunction(TypedDict):
    name: str
    arguments: str


class ChatCompletionMessageToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: ChatCompletionMessageToolCallFunction


class ChatCompletionMessageCustomToolCallCustom(TypedDict):
    name: str
    input: str


class ChatCompletionMessageCustomToolCall(TypedDict):
    id: str
    type: Literal["custom"]
    custom: ChatCompletionMessageCustomToolCallCustom


ChatCompletionMessageToolCalls = List[Union[ChatCompletionMessageToolCall, ChatCompletionMessageCustomToolCall]]


class _ChatCompletionResponseMessageOptional(TypedDict, total=False):
    tool_calls: ChatCompletionMessageToolCalls
    function_call: ChatCompletionResponseFunctionCall
    reasoning_content: Optional[str]
    refusal: Optional[str]
    audio: ChatCompletionResponseMessageAudio
    annotations: List[ChatCompletionResponseMessageAnnotation]


class ChatCompletionResponseMessage(_ChatCompletionResponseMessageOptional):
    content: Optional[str]
    role: Literal["assistant", "function"]


class ChatCompletionFunction(TypedDict, total=False):
    name: str
    description: str
    parameters: Dict[str, JsonType]


class ChatCompletionTopLogprobToken(TypedDict):
    token: str
    logprob: float
    bytes: Optional[List[int]]


class ChatCompletionLogprobToken(ChatCompletionTopLogprobToken):
    top_logprobs: List[ChatCompletionTopLogprobToken]


class ChatCompletionLogprobs(TypedDict):
    content: Optional[List[ChatCompletionLogprobToken]]
    refusal: Optional[List[ChatCompletionLogprobToken]]


class ChatCompletionResponseChoice(TypedDict):
    index: int
    message: ChatCompletionResponseMessage
    logprobs: Optional[ChatCompletionLogprobs]
    finish_reason: Optional[str]


ServiceTier = Literal["auto", "default", "flex", "scale", "priority"]


class _CreateChatCompletionResponseOptional(TypedDict, total=False):
    usage: CompletionUsage
    service_tier: Optional[ServiceTier]
    system_fingerprint: Optional[str]


class CreateChatCompletionResponse(_CreateChatCompletionResponseOptional):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: List[ChatCompletionResponseChoice]


# ---- chat completion stream chunks ------------------------------------------------------------------


class ChatCompletionMessageToolCallChunkFunction(TypedDict, total=False):
    name: Optional[str]
    arguments: str


class ChatCompletionMessageToolCallChunk(TypedDict, total=False):
    index: int
    id: str
    type: Literal["function"]
    function: ChatCompletionMessageToolCallChunkFunction


class ChatCompletionStreamResponseDeltaEmpty(TypedDict):
    pass


class ChatCompletionStreamResponseDeltaFunctionCall(TypedDict):
    name: str
    arguments: str


ChatCompletionRole = Literal["developer", "system", "user", "assistant", "tool", "function"]


class ChatCompletionStreamResponseDelta(TypedDict, total=False):
    content: Optional[str]
    reasoning_content: Optional[str]
    function_call: ChatCompletionStreamResponseDeltaFunctionCall
    tool_calls: List[ChatCompletionMessageToolCallChunk]
    role: ChatCompletionRole
    refusal: Optional[str]


class ChatCompletionStreamResponseChoice(TypedDict):
    index: int
    delta: Union[ChatCompletionStreamResponseDelta, ChatCompletionStreamResponseDeltaEmpty]
    finish_reason: Optional[Literal["stop", "length", "tool_calls", "function_call", "content_filter"]]
    logprobs: Optional[ChatCompletionLogprobs]


class _CreateChatCompletionStreamResponseOptional(TypedDict, total=False):
    usage: Optional[CompletionUsage]
    service_tier: Optional[ServiceTier]
    system_fingerprint: Optional[str]


class CreateChatCompletionStreamResponse(_CreateChatCompletionStreamResponseOptional):
    id: str
    model: str
    object: Literal["chat.completion.chunk"]
    created: int
    choices: List[ChatCompletionStreamResponseChoice]
