"""The request shapes: chat messages and their content parts, response formats, tools and
tool choices, MCP tools."""

from typing import Dict, List, Literal, Optional, TypedDict, Union

from llama_ffi.llama_cpp.llama_types.responses import (
    ChatCompletionMessageToolCalls,
    JsonType,
)

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
