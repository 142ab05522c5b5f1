"""llama-cpp-python's ``llama_types``: the OpenAI request and response shapes as TypedDicts.

At run time a TypedDict is ``dict``: ``ChatCompletionRequestUserMessage(role="user", content="Hi")``
is the plain dict every ``Llama`` method takes and returns. The classes are for type checkers and
for code that imports them by name (llama-cpp-haystack, instructor). Fields follow OpenAI's API
reference; optional ones live in a ``total=False`` base.
"""

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


# ---- chat completion requests -----------------------------------------------------------------------


class ChatCompletionFunctions(TypedDict, total=False):
    name: str
    description: str
    parameters: Dict[str, JsonType]


class ChatCompletionFunctionCallOption(TypedDict):
    name: str


class ChatCompletionResponseFormatJSONSchema(TypedDict, total=False):
    name: str
    description: str
    schema: Dict[str, JsonType]
    strict: Optional[bool]


class ChatCompletionRequestResponseFormat(TypedDict, total=False):
    type: Literal["text", "json_object", "json_schema"]
    schema: JsonType  # llama-cpp-python's shortcut beside OpenAI's json_schema
    json_schema: ChatCompletionResponseFormatJSONSchema


class ChatCompletionRequestMessageContentPartText(TypedDict):
    type: Literal["text"]
    text: str


class ChatCompletionRequestMessageContentPartImageImageUrl(TypedDict, total=False):
    url: str
    detail: Literal["auto", "low", "high"]


class ChatCompletionRequestMessageContentPartImage(TypedDict):
    type: Literal["image_url"]
    image_url: Union[str, ChatCompletionRequestMessageContentPartImageImageUrl]


class ChatCompletionRequestMessageContentPartInputAudioData(TypedDict):
    data: str
    format: Literal["wav", "mp3"]


class ChatCompletionRequestMessageContentPartAudio(TypedDict):
    type: Literal["input_audio"]
    input_audio: ChatCompletionRequestMessageContentPartInputAudioData


class ChatCompletionRequestMessageContentPartFileData(TypedDict, total=False):
    file_data: str
    file_id: str
    filename: str


class ChatCompletionRequestMessageContentPartFile(TypedDict):
    type: Literal["file"]
    file: ChatCompletionRequestMessageContentPartFileData


class ChatCompletionRequestMessageContentPartRefusal(TypedDict):
    type: Literal["refusal"]
    refusal: str


ChatCompletionRequestMessageContentPart = Union[
    ChatCompletionRequestMessageContentPartText,
    ChatCompletionRequestMessageContentPartImage,
    ChatCompletionRequestMessageContentPartAudio,
    ChatCompletionRequestMessageContentPartFile,
    ChatCompletionRequestMessageContentPartRefusal,
]


class _NamedMessage(TypedDict, total=False):
    name: str


class ChatCompletionRequestDeveloperMessage(_NamedMessage):
    role: Literal["developer"]
    content: Union[str, List[ChatCompletionRequestMessageContentPartText]]


class ChatCompletionRequestSystemMessage(_NamedMessage):
    role: Literal["system"]
    content: Optional[str]


class ChatCompletionRequestUserMessage(_NamedMessage):
    role: Literal["user"]
    content: Optional[Union[str, List[ChatCompletionRequestMessageContentPart]]]


MCPConnectorID = Literal[
    "connector_dropbox",
    "connector_gmail",
    "connector_googlecalendar",
    "connector_googledrive",
    "connector_microsoftteams",
    "connector_outlookcalendar",
    "connector_outlookemail",
    "connector_sharepoint",
]
MCPToolCallStatus = Literal["in_progress", "completed", "incomplete", "calling", "failed"]


class MCPToolCall(TypedDict, total=False):
    type: Literal["mcp_call"]
    id: str
    server_label: str
    name: str
    arguments: str
    output: Optional[str]
    error: Optional[str]
    status: MCPToolCallStatus
    approval_request_id: Optional[str]


class MCPListToolsTool(TypedDict, total=False):
    name: str
    description: Optional[str]
    input_schema: Dict[str, JsonType]
    annotations: Optional[Dict[str, JsonType]]


class MCPListTools(TypedDict, total=False):
    type: Literal["mcp_list_tools"]
    id: str
    server_label: str
    tools: List[MCPListToolsTool]
    error: Optional[str]


class MCPToolFilter(TypedDict, total=False):
    tool_names: List[str]
    read_only: bool


class MCPToolApprovalFilter(TypedDict, total=False):
    always: MCPToolFilter
    never: MCPToolFilter


class MCPTool(TypedDict, total=False):
    type: Literal["mcp"]
    server_label: str
    server_url: str
    connector_id: MCPConnectorID
    authorization: str
    headers: Optional[Dict[str, str]]
    allowed_tools: Optional[Union[List[str], MCPToolFilter]]
    require_approval: Optional[Union[Literal["always", "never"], MCPToolApprovalFilter]]
    server_description: str


class ChatCompletionRequestAssistantMessageFunctionCall(TypedDict):
    name: str
    arguments: str


class _ChatCompletionRequestAssistantMessageOptional(_NamedMessage, total=False):
    content: Optional[str]
    reasoning_content: Optional[str]
    refusal: Optional[str]
    tool_calls: ChatCompletionMessageToolCalls
    function_call: ChatCompletionRequestAssistantMessageFunctionCall


class ChatCompletionRequestAssistantMessage(_ChatCompletionRequestAssistantMessageOptional):
    role: Literal["assistant"]


class ChatCompletionRequestToolMessage(TypedDict):
    role: Literal["tool"]
    content: Optional[Union[str, List[ChatCompletionRequestMessageContentPartText]]]
    tool_call_id: str


class ChatCompletionRequestFunctionMessage(TypedDict):
    role: Literal["function"]
    content: Optional[str]
    name: str


ChatCompletionRequestMessage = Union[
    ChatCompletionRequestDeveloperMessage,
    ChatCompletionRequestSystemMessage,
    ChatCompletionRequestUserMessage,
    ChatCompletionRequestAssistantMessage,
    ChatCompletionRequestToolMessage,
    ChatCompletionRequestFunctionMessage,
]


class ChatCompletionRequestFunctionCallOption(TypedDict):
    name: str


ChatCompletionRequestFunctionCall = Union[Literal["none", "auto"], ChatCompletionRequestFunctionCallOption]
ChatCompletionFunctionParameters = Dict[str, JsonType]


class _ChatCompletionToolFunctionOptional(TypedDict, total=False):
    description: str
    parameters: ChatCompletionFunctionParameters
    strict: bool


class ChatCompletionToolFunction(_ChatCompletionToolFunctionOptional):
    name: str


class ChatCompletionTool(TypedDict):
    type: Literal["function"]
    function: ChatCompletionToolFunction


class ChatCompletionAllowedTools(TypedDict):
    mode: Literal["auto", "required"]
    tools: List[Dict[str, JsonType]]


class ChatCompletionAllowedToolsChoice(TypedDict):
    type: Literal["allowed_tools"]
    allowed_tools: ChatCompletionAllowedTools


class ChatCompletionNamedToolChoiceFunction(TypedDict):
    name: str


class ChatCompletionNamedToolChoice(TypedDict):
    type: Literal["function"]
    function: ChatCompletionNamedToolChoiceFunction


class ChatCompletionNamedToolChoiceCustomObject(TypedDict):
    name: str


class ChatCompletionNamedToolChoiceCustom(TypedDict):
    type: Literal["custom"]
    custom: ChatCompletionNamedToolChoiceCustomObject


ChatCompletionToolChoiceOption = Union[
    Literal["none", "auto", "required"],
    ChatCompletionAllowedToolsChoice,
    ChatCompletionNamedToolChoice,
    ChatCompletionNamedToolChoiceCustom,
]

# ---- the older names llama-cpp-python keeps -------------------------------------------------------
EmbeddingData = Embedding
CompletionChunk = CreateCompletionResponse
Completion = CreateCompletionResponse
CreateCompletionStreamResponse = CreateCompletionResponse
ChatCompletionMessage = ChatCompletionResponseMessage
ChatCompletionChoice = ChatCompletionResponseChoice
ChatCompletion = CreateChatCompletionResponse
ChatCompletionChunkDeltaEmpty = ChatCompletionStreamResponseDeltaEmpty
ChatCompletionChunkChoice = ChatCompletionStreamResponseChoice
ChatCompletionChunkDelta = ChatCompletionStreamResponseDelta
ChatCompletionChunk = CreateChatCompletionStreamResponse
ChatCompletionStreamResponse = CreateChatCompletionStreamResponse
ChatCompletionResponseFunction = ChatCompletionFunction
ChatCompletionFunctionCall = ChatCompletionResponseFunctionCall

_TYPING = {"Any", "Dict", "List", "Literal", "Optional", "TypedDict", "Union"}
__all__ = sorted(name for name in dir() if not name.startswith("_") and name not in _TYPING)
