"""The models a router serves, by id: every GGUF of ``--models-dir`` and every section of
``--models-preset`` (``hf_cache`` lists what ``-hf`` cached), each with the serve flags that load
it (llama-server's rules: a file is named by its stem, a subdirectory by its name with its projector
and draft beside the model; a preset's keys are flags without their dashes, or their ``LLAMA_ARG_*``
names; ``[*]`` holds the defaults)."""

from __future__ import annotations

import configparser
import dataclasses
from pathlib import Path

DRAFT_PREFIXES = ("mtp-", "dspark-", "dflash-")  # companion files, never models of their own
TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off"}


@dataclasses.dataclass(frozen=True)
class ModelEntry:
    id: str
    flags: tuple[str, ...]  # serve flags that load it (--model PATH ... )
    source: str  # "cache" (-hf downloads), "models_dir" or "preset"
    preset: str = ""  # its section, as written (for /models)


def _companion(name: str) -> bool:
    return "mmproj" in name or name.startswith(DRAFT_PREFIXES)


def from_models_dir(directory: str | Path) -> list[ModelEntry]:
    root = Path(directory)
    if not root.is_dir():
        raise ValueError(f"--models-dir: {directory!r} does not exist or is not a directory")
    out = []
    for entry in sorted(root.iterdir()):
        if entry.is_dir():
            ggufs = sorted(p for p in entry.iterdir() if p.is_file() and p.name.endswith(".gguf"))
            models = [p for p in ggufs if not _companion(p.name)]
            shards = [p for p in models if "-00001-of-" in p.name]
            model = (shards or models or [None])[0]
            if model is None:
                continue
            flags = ["--model", str(model)]
            mmproj = next((p for p in ggufs if "mmproj" in p.name), None)
            draft = next((p for p in ggufs if p.name.startswith(DRAFT_PREFIXES)), None)
            if mmproj is not None:
                flags += ["--mmproj", str(mmproj)]
            if draft is not None:
                flags += ["--model-draft", str(draft)]  # its type is read from the file at load
            out.append(ModelEntry(entry.name, tuple(flags), "models_dir"))
        elif entry.is_file() and entry.name.endswith(".gguf") and not _companion(entry.name):
            out.append(ModelEntry(entry.name[: -len(".gguf")], ("--model", str(entry)), "models_dir"))
    return out


def from_preset(path: str | Path, flags: dict[str, tuple[str, bool]], env_names: dict[str, str]) -> list[ModelEntry]:
    """``flags``: each serve flag without its dashes -> (the flag, whether it is a switch);
    ``env_names``: llama-server's ``LLAMA_ARG_*`` names -> the flag."""
    parser = configparser.ConfigParser(interpolation=None, default_section="\x00none", strict=False)
    parser.optionxform = str  # keys keep their case (LLAMA_ARG_* names)
    try:
        with open(path, encoding="utf-8") as f:
            parser.read_file(f)
    except (OSError, configparser.Error) as error:
        raise ValueError(f"--models-preset {path}: {error}") from None
    defaults = dict(parser["*"]) if parser.has_section("*") else {}
    out = []
    for section in parser.sections():
        if section == "*":
            continue
        options = {**defaults, **dict(parser[section])}
        args: list[str] = []
        for key, value in options.items():
            args += _flag(path, section, key.strip(), value.strip(), flags, env_names)
        text = "\n".join(f"{k} = {v}" for k, v in parser[section].items())
        out.append(ModelEntry(section, tuple(args), "preset", f"[{section}]\n{text}\n"))
    return out


def _flag(path, section: str, key: str, value: str, flags, env_names) -> list[str]:
    name = env_names.get(key, key).lstrip("-")
    if name not in flags:
        raise ValueError(f"--models-preset {path}: [{section}] {key}: not a flag of llama-ffi serve")
    flag, switch = flags[name]
    if not switch:
        return [flag, value]
    if value.lower() in TRUE:
        return [flag]
    if value.lower() in FALSE:
        return []
    raise ValueError(f"--models-preset {path}: [{section}] {key} = {value!r}: expected true or false")
