"""The names of llama-cpp-python that llama-ffi does not provide, each with what to use instead.

A module of the ``llama_cpp`` package answers such a name with ``NotProvidedError`` (an
``AttributeError``, so ``hasattr`` and ``getattr(..., default)`` feature checks take their
fallback) whose message names it and the alternative. Names of llama-cpp-python's ctypes layer
(``llama_cpp.llama_cpp``, ``mtmd_cpp``) come from ``llama_ffi.ctypes_view``: C constants, typed
ctypes functions, structs, typedefs and pointer types, all derived from the compiled C API.
"""

from __future__ import annotations


class NotProvidedError(AttributeError):
    """A llama-cpp-python name that llama-ffi does not provide; the message says what to use."""


SERVER = "run `llama-ffi serve` (llama-server's flags and routes, OpenAI and Anthropic APIs)"
LOGGING = "llama-ffi sends llama.cpp's logs to the `llama_ffi` logger: configure it with the logging module"
TRIE = "set_cache(LlamaRAMCache()) or LlamaDiskCache(); the engine's slots reuse prefixes themselves"
CTYPES_SAMPLER = "pass sampling parameters or logits_processor= to create_completion; llama_ffi.high.sampling"
GBNF_CONVERTER = (
    "LlamaGrammar.from_json_schema(schema) or response_format={'type': 'json_object', 'schema': ...}; "
    "llama-ffi compiles JSON Schema with llguidance, not through GBNF"
)
HANDLER = "chat_handler=Jinja2ChatFormatter(...).to_chat_handler(), or the model's own template"
FORMAT = "Jinja2ChatFormatter(template, eos_token, bos_token) with the model's template, or chat_format=NAME"

# module ("" for the package itself) -> name -> what to use instead
REFUSED: dict[str, dict[str, str]] = {
    "llama": {
        "AbortCriteria": "stopping_criteria=, or cancel the request (close a stream, or asyncio task.cancel())",
        "CommonSamplerType": CTYPES_SAMPLER,
        "CustomSampler": CTYPES_SAMPLER,
        "LlamaSamplingContext": CTYPES_SAMPLER,
        "LlamaSamplingParams": "llama_ffi.high.SamplingParams (create_completion's keywords)",
        "HybridCheckpointCache": TRIE,
        "LlamaTrieCache": TRIE,
        "add_log_filters": LOGGING,
        "clear_log_filters": LOGGING,
        "configure_logging": LOGGING,
        "get_log_filters": LOGGING,
        "get_verbosity": LOGGING,
        "reset_log_filters": LOGGING,
        "set_log_filters": LOGGING,
        "set_verbose": "Llama(verbose=True), or the `llama_ffi` logger's level",
        "set_verbosity": LOGGING,
        "suppress_stdout_stderr": "llama.cpp's output already goes to the `llama_ffi` logger, not to stdout",
    },
    "llama_cache": {
        "HybridCheckpoint": TRIE,
        "HybridCheckpointCache": TRIE,
        "LlamaTrieCache": TRIE,
        "TrieNode": TRIE,
    },
    "llama_chat_format": {
        "Llama3VisionAlpha": HANDLER,
        "Singleton": "LlamaChatCompletionHandlerRegistry() is itself one registry per process",
        "chatml_function_calling": "chat_format='chatml-function-calling' (tools with create_chat_completion)",
        "functionary_chat_handler": "tools= with the model's own template (functionary models carry theirs)",
        "functionary_v1_v2_chat_handler": "tools= with the model's own template (functionary models carry theirs)",
        "hf_autotokenizer_to_chat_completion_handler": "hf_tokenizer_config_to_chat_completion_handler(config)",
        "hf_autotokenizer_to_chat_formatter": "hf_tokenizer_config_to_chat_formatter(config)",
        "suppress_stdout_stderr": "llama.cpp's output already goes to the `llama_ffi` logger, not to stdout",
        **{
            f"format_{name}": FORMAT
            for name in (
                "alpaca",
                "baichuan",
                "baichuan2",
                "intel",
                "mistrallite",
                "oasst_llama",
                "open_orca",
                "openbuddy",
                "phind",
                "pygmalion",
                "redpajama_incite",
                "saiga",
                "snoozy",
            )
        },
    },
    "llama_grammar": {
        name: GBNF_CONVERTER
        for name in (
            "BuiltinRule",
            "DOT",
            "DOTALL",
            "ESCAPED_IN_REGEXPS_BUT_NOT_IN_LITERALS",
            "GRAMMAR_LITERAL_ESCAPES",
            "GRAMMAR_LITERAL_ESCAPE_RE",
            "GRAMMAR_RANGE_LITERAL_ESCAPE_RE",
            "INVALID_RULE_CHARS_RE",
            "NON_LITERAL_SET",
            "PRIMITIVE_RULES",
            "RESERVED_NAMES",
            "SPACE_RULE",
            "STRING_FORMAT_RULES",
            "SchemaConverter",
            "json_schema_to_gbnf",
        )
    },
    "llama_speculative": {
        "LlamaDraftModel": "speculative=SpecConfig(type='draft', draft_model_path=...) (a draft GGUF)",
        "create_native_spec_engine": "Llama(speculative=SpecConfig(...)): the engine drafts in its own loop",
        "create_spec_engine": "Llama(speculative=SpecConfig(...)): the engine drafts in its own loop",
        "SPEC_VOCAB_CHECK_START_TOKEN_ID": "a draft model's vocabulary is checked when the Llama loads",
        "SPEC_VOCAB_MAX_SIZE_DIFFERENCE": "a draft model's vocabulary is checked when the Llama loads",
    },
    "llama_multimodal": {"ggml_log_callback": LOGGING},
    "server": {"*": SERVER},
    "_internals": {
        "*": "llama_ffi.high's owners of the same C objects: Model, Context, Batch, SamplingParams, Tokenizer"
    },
    "llama_cpp_ext": {"*": "llama_ffi.lib (every function of llama.h, ggml*.h, gguf.h and mtmd.h, through cffi)"},
    "llava_cpp": {"*": "llama.cpp removed llava's C API: MTMDChatHandler / mmproj_path= use mtmd"},
}
REFUSED["llama_grammar"].update(
    dict.fromkeys(
        [f"{name}_GBNF" for name in ("ARITHMETIC", "C", "CHESS", "ENGLISH", "JAPANESE", "JSON", "JSON_ARR", "LIST")],
        "LlamaGrammar.from_file() on the grammars/ folder of llama.cpp's source (the same grammars)",
    )
)
CTYPES = (
    "a helper of llama-cpp-python's hand-written ctypes declarations; here every C function comes typed from the "
    "C API itself (llama_cpp.llama_cpp.NAME, or llama_ffi.lib.NAME through cffi)"
)
for module, names in {
    "llama_cpp": ("LlamaModelKVOverrideType", "LlamaModelMetaKey", "ctypes_function", "ctypes_function_llama_ext"),
    "mtmd_cpp": ("clip_context_params", "clip_flash_attn_type", "ctypes_function", "ctypes_function_mtmd"),
}.items():
    REFUSED.setdefault(module, {}).update(dict.fromkeys(names, CTYPES))
REFUSED["llama_chat_format"].update(
    dict.fromkeys(
        [
            "GPT_OSS_BOS_TOKEN",
            "GPT_OSS_EOS_TOKEN",
            "GPT_OSS_PAD_TOKEN",
            "LLAMA4_INSTRUCT_BOS_TOKEN",
            "LLAMA4_INSTRUCT_CHAT_TEMPLATE",
            "LLAMA4_INSTRUCT_EOS_TOKEN",
            "MIXTRAL_INSTRUCT_CHAT_TEMPLATE",
        ],
        "the model's own template (the GGUF's tokenizer.chat_template), which Llama uses by default",
    )
)
REFUSED["llama_chat_format"]["format"] = FORMAT
REFUSED["llama_speculative"].update({})
REFUSED["llama_multimodal"].update({"Llama3VisionAlpha": HANDLER})
REFUSED["llama_chat_format"].update({"Llama3VisionAlphaChatHandler": HANDLER})

CTYPES_MODULES = ("", "llama", "llama_cpp", "mtmd_cpp", "_internals", "llama_embedding")


def c_name(name: str):
    """What a C name of llama-cpp-python's ctypes layer is here (``ctypes_view``: a constant's
    value, a typed ctypes function, a struct, a typedef or a pointer to one); NotProvidedError for
    a C-looking name the C API no longer has; None for any other name."""
    from llama_ffi.ctypes_view import VIEW

    value = VIEW.named(name)
    if value is not None:
        return value
    base = name.removesuffix("_p_ctypes").removesuffix("_p")
    if base.startswith(("llama_", "ggml_", "gguf_", "mtmd_", "LLAMA_", "GGML_", "MTMD_")):
        raise NotProvidedError(
            f"{name} is not in the C API of the llama.cpp this llama-ffi was built from "
            f"(llama.cpp removed or renamed it): llama_ffi.lib lists what it has"
        )
    return None


def missing(module: str, name: str):
    """What ``llama_cpp.<module>.<name>`` is when the module does not define it: a C constant, or
    NotProvidedError naming the alternative, or a plain AttributeError."""
    if name in _types():  # llama-cpp-python's modules re-export llama_types' shapes
        from llama_ffi.llama_cpp import llama_types

        return getattr(llama_types, name)
    # the package itself re-exports llama_cpp.llama and llama_cpp.llama_cpp
    table = REFUSED.get(module, {}) if module else {**REFUSED["llama_cpp"], **REFUSED["llama"]}
    alternative = table.get(name) or table.get("*")
    where = f"llama_cpp.{module}.{name}" if module else f"llama_cpp.{name}"
    if alternative is not None and not name.startswith("__"):
        raise NotProvidedError(f"{where} is not provided by llama-ffi: {alternative}")
    if module in CTYPES_MODULES and not name.startswith("_"):
        value = c_name(name)
        if value is not None:
            return value
    raise AttributeError(f"module {'llama_cpp.' + module if module else 'llama_cpp'!r} has no attribute {name!r}")


def _types() -> list[str]:
    from llama_ffi.llama_cpp import llama_types

    return llama_types.__all__
