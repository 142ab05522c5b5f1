"""What llama-server offers agents in its web UI, beside the model: server-side tools (``--tools``:
read, write and edit files, search them, run commands; ``--tools-runtime`` to run them in a
container or over SSH), the tools of MCP servers (``--mcp-servers-config`` / ``--mcp-servers-json``),
and a CORS proxy to remote MCP servers (``--ui-mcp-proxy``). ``-ag/--agent`` turns on the tools and
the proxy. Each of these hands the API's caller this machine: they are off by default, and while
tools are on, CORS allows only pages from localhost unless ``--cors-origins`` says otherwise.

One ``Agent`` per server process: router mode's app holds it, not its models' apps."""

from __future__ import annotations

import argparse
import sys

from llama_ffi.server.agent import mcp
from llama_ffi.server.agent.toolbox import BUILTIN, Toolbox, builtin_names


class Agent:
    def __init__(self, toolbox: Toolbox | None = None, cors_proxy: bool = False) -> None:
        self.toolbox, self.cors_proxy = toolbox, cors_proxy

    def add_routes(self, app) -> None:
        """Serve ``/tools`` and ``/cors-proxy`` on ``app`` with this agent's toolbox."""
        from llama_ffi.server.agent import routes  # FastAPI's: the server extra

        app.state.agent = self
        app.include_router(routes.router)

    def start(self) -> None:
        if self.toolbox is not None:
            self.toolbox.start()

    def abort(self) -> None:
        """The process is told to stop: what runs now ends at once (its caller answered)."""
        if self.toolbox is not None:
            self.toolbox.abort()

    def close(self) -> None:
        if self.toolbox is not None:
            self.toolbox.close()

    @property
    def localhost_only(self) -> bool:
        """Whether CORS should default to localhost: tools reach this machine's files."""
        return self.toolbox is not None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("agents (experimental: each lets API callers act on this machine)")
    g.add_argument(
        "--tools",
        metavar="TOOL1,TOOL2,...",
        help=f"built-in tools served on /tools: all, or some of {', '.join(BUILTIN)} (default: none)",
    )
    g.add_argument(
        "--tools-runtime",
        metavar="SPEC",
        help="run the tools elsewhere: docker:IMAGE / podman:IMAGE (a container started for them), "
        "docker-container:ID / podman-container:ID (a running one), ssh:HOST",
    )
    g.add_argument("--mcp-servers-config", metavar="PATH", help='a JSON file {"mcpServers": {...}} (Cursor\'s)')
    g.add_argument("--mcp-servers-json", metavar="JSON", help="the same JSON inline")
    g.add_argument(
        "--ui-mcp-proxy",
        "--webui-mcp-proxy",
        dest="ui_mcp_proxy",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="serve /cors-proxy, which forwards requests to other servers",
    )
    g.add_argument(
        "-ag", "--agent", action=argparse.BooleanOptionalAction, default=False, help="all tools and the CORS proxy"
    )


def from_flags(args: argparse.Namespace) -> Agent:
    """The agent the flags ask for; a bad tool name, runtime or MCP config is a ``ValueError``."""
    names = builtin_names("all" if args.agent and not args.tools else args.tools)
    servers = mcp.load_config(args.mcp_servers_config, args.mcp_servers_json)
    toolbox = Toolbox(names, args.tools_runtime, servers) if names or servers else None
    if toolbox is None and args.tools_runtime:
        raise ValueError("--tools-runtime needs --tools")
    agent = Agent(toolbox, cors_proxy=args.ui_mcp_proxy or args.agent)
    if toolbox is not None or agent.cors_proxy:
        print(
            "llama-ffi: warning: tools or the CORS proxy are on: whoever can call this server can act on "
            "this machine; do not expose it to untrusted clients",
            file=sys.stderr,
        )
    return agent
