"""llama-cpp-python's ``llama_types``: the OpenAI request and response shapes as TypedDicts.

At run time a TypedDict is ``dict``: ``ChatCompletionRequestUserMessage(role="user", content="Hi")``
is the plain dict every ``Llama`` method takes and returns. The classes are for type checkers and
for code that imports them by name (llama-cpp-haystack, instructor). Fields follow OpenAI's API
reference; optional ones live in a ``total=False`` base.
"""

from llama_ffi.llama_cpp.llama_types.requests import *  # noqa: F403
from llama_ffi.llama_cpp.llama_types.responses import *  # noqa: F403
from llama_ffi.llama_cpp.llama_types.responses import (
    ChatCompletionFunction,
    ChatCompletionResponseChoice,
    ChatCompletionResponseFunctionCall,
    ChatCompletionResponseMessage,
    ChatCompletionStreamResponseChoice,
    ChatCompletionStreamResponseDelta,
    ChatCompletionStreamResponseDeltaEmpty,
    CreateChatCompletionResponse,
    CreateChatCompletionStreamResponse,
    CreateCompletionResponse,
    Embedding,
)

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
