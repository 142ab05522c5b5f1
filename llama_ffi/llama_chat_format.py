"""llama-cpp-python's ``llama_chat_format`` import path for the multimodal chat handlers
(``from llama_cpp.llama_chat_format import Qwen25VLChatHandler`` keeps working after changing the
package name). Text chat formats are ``Llama(chat_format=...)`` and the model's own template."""

from __future__ import annotations

from llama_ffi.llama_multimodal import *  # noqa: F401,F403
from llama_ffi.llama_multimodal import __all__, __getattr__  # noqa: F401
